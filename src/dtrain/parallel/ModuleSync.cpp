// Cross-rank module consistency: hash check, description exchange on mismatch, coalesced broadcast.
#include "dtrain/parallel/ModuleSync.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include "dtrain/util/Hash.h"

namespace dtrain::parallel {

namespace {

std::string shape_string(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

// One entry per line, fields separated by tabs; names never hold either.
std::string serialize(const std::vector<TensorDescription>& entries) {
  std::string out;
  for (const auto& e : entries) out += e.kind + '\t' + e.name + '\t' + e.dtype + '\t' + e.shape + '\n';
  return out;
}

std::vector<TensorDescription> deserialize(const std::string& text) {
  std::vector<TensorDescription> entries;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    TensorDescription e;
    std::getline(fields, e.kind, '\t');
    std::getline(fields, e.name, '\t');
    std::getline(fields, e.dtype, '\t');
    std::getline(fields, e.shape, '\t');
    entries.push_back(std::move(e));
  }
  return entries;
}

std::int64_t fnv1a(const std::string& text) {
  util::Fnv1a64 hash;
  hash.add(text);
  return static_cast<std::int64_t>(hash.value());
}

std::string describe(const TensorDescription& e, std::size_t index) {
  return fmt::format("{} {} '{}' {} {}", e.kind, index, e.name, e.shape, e.dtype);
}

// The first entry where `other` differs from `root`'s, phrased for a user; "" when equal.
std::string first_difference(const std::vector<TensorDescription>& root,
                             const std::vector<TensorDescription>& other, int root_rank, int other_rank) {
  const auto n = std::max(root.size(), other.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (i >= other.size() || i >= root.size()) {
      const bool other_short = i >= other.size();
      return fmt::format("rank {} has {} parameters and buffers, rank {} has {}; rank {} lacks {}",
                         other_rank, other.size(), root_rank, root.size(),
                         other_short ? other_rank : root_rank, describe(other_short ? root[i] : other[i], i));
    }
    const auto& a = root[i];
    const auto& b = other[i];
    if (a.kind == b.kind && a.name == b.name) {
      if (a.shape == b.shape && a.dtype == b.dtype) continue;
      return fmt::format("{} {} '{}': rank {} has {} {}, rank {} has {} {}", a.kind, i, a.name, root_rank,
                         a.shape, a.dtype, other_rank, b.shape, b.dtype);
    }
    return fmt::format("entry {}: rank {} has {}, rank {} has {}", i, root_rank, describe(a, i), other_rank,
                       describe(b, i));
  }
  return "";
}

}  // namespace

std::vector<TensorDescription> describe_module(const torch::nn::Module& module) {
  std::vector<TensorDescription> entries;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    entries.push_back(
        {"parameter", p.key(), c10::toString(p.value().scalar_type()), shape_string(p.value())});
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    entries.push_back({"buffer", b.key(), c10::toString(b.value().scalar_type()), shape_string(b.value())});
  }
  return entries;
}

std::vector<torch::Tensor> module_state(const torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors = module.parameters(/*recurse=*/true);
  for (const auto& b : module.buffers(/*recurse=*/true)) tensors.push_back(b);
  return tensors;
}

void verify_same_module(comm::Communicator& comm, const torch::nn::Module& module) {
  const int n = comm.size();
  if (n == 1) return;
  const auto mine = describe_module(module);
  const std::string text = serialize(mine);

  auto hash = torch::full({1}, fnv1a(text), torch::kInt64);
  auto hashes = torch::empty({n}, torch::kInt64);
  comm.allgather(hash, hashes);
  if ((hashes == hashes[0]).all().item<bool>()) return;

  // Rare path: exchange the descriptions themselves, padded to the longest, to name the difference.
  auto length = torch::full({1}, static_cast<std::int64_t>(text.size()), torch::kInt64);
  auto lengths = torch::empty({n}, torch::kInt64);
  comm.allgather(length, lengths);
  const std::int64_t longest = lengths.max().item<std::int64_t>();
  auto padded = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(padded.data_ptr(), text.data(), text.size());
  auto all = torch::empty({n * longest}, torch::kUInt8);
  comm.allgather(padded, all);

  const auto* bytes = reinterpret_cast<const char*>(all.data_ptr());
  const auto lens = lengths.accessor<std::int64_t, 1>();
  const auto root = deserialize(std::string(bytes, lens[0]));
  for (int r = 1; r < n; ++r) {
    const auto other = deserialize(std::string(bytes + r * longest, lens[r]));
    const auto difference = first_difference(root, other, 0, r);
    if (!difference.empty()) {
      throw std::invalid_argument(
          fmt::format("[rank {}/{}] DataParallel: the ranks' models differ: {}; every rank must build the "
                      "same model with the "
                      "same options before wrapping it",
                      comm.rank(), n, difference));
    }
  }
  // Same descriptions but different hashes cannot happen with a deterministic hash.
  TORCH_INTERNAL_ASSERT(false, "module description hashes differ while the descriptions agree");
}

void broadcast_coalesced(comm::Communicator& comm, const std::vector<torch::Tensor>& tensors, int root,
                         std::int64_t max_bucket_bytes) {
  if (comm.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;

  // Group by (dtype, device) in order of first appearance, so every rank forms the same groups.
  std::vector<std::vector<torch::Tensor>> groups;
  std::map<std::string, std::size_t> group_of;
  for (const auto& t : tensors) {
    const auto key = fmt::format("{}/{}", c10::toString(t.scalar_type()), t.device().str());
    auto [it, inserted] = group_of.emplace(key, groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(t);
  }

  auto flush = [&](std::vector<torch::Tensor>& chunk) {
    if (chunk.empty()) return;
    std::vector<torch::Tensor> flat_parts;
    flat_parts.reserve(chunk.size());
    for (const auto& t : chunk) flat_parts.push_back(t.reshape({-1}));
    auto flat = torch::cat(flat_parts);
    comm.broadcast(flat, root);
    std::int64_t offset = 0;
    for (auto& t : chunk) {
      t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    chunk.clear();
  };

  for (auto& group : groups) {
    std::vector<torch::Tensor> chunk;
    std::int64_t bytes = 0;
    for (const auto& t : group) {
      const std::int64_t b = t.numel() * static_cast<std::int64_t>(t.element_size());
      if (!chunk.empty() && bytes + b > max_bucket_bytes) {
        flush(chunk);
        bytes = 0;
      }
      chunk.push_back(t);
      bytes += b;
    }
    flush(chunk);
  }
}

}  // namespace dtrain::parallel
