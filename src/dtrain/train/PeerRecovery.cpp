// See PeerRecovery.h, Note [Recovering from a peer]. The state travels as a header (names, dtypes,
// shapes and the metadata, as JSON) and one flat buffer per dtype, so that it is copied once into
// the buffers and once out, with no archive in between.
#include "dtrain/train/PeerRecovery.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

namespace dtrain::train {
namespace {

// Broadcasts `bytes` (significant on `root` only) and returns them on every rank.
std::string broadcast_bytes(comm::Communicator& comm, const std::string& bytes, int root) {
  auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
  comm.broadcast(size, root);
  auto payload = torch::empty({size.item<std::int64_t>()}, torch::kUInt8);
  if (comm.rank() == root) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
  comm.broadcast(payload, root);
  return {static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(payload.numel())};
}

struct Entry {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t numel = 1;
};

// The header's tensors grouped by dtype, in name order.
std::map<c10::ScalarType, std::vector<Entry>> by_dtype(const nlohmann::json& tensors) {
  std::map<c10::ScalarType, std::vector<Entry>> groups;
  for (const auto& [name, entry] : tensors.items()) {
    Entry e{name, entry.at("shape").get<std::vector<std::int64_t>>()};
    for (const auto d : e.shape) e.numel *= d;
    groups[static_cast<c10::ScalarType>(entry.at("dtype").get<int>())].push_back(std::move(e));
  }
  return groups;
}

}  // namespace

PeerState recover_from_peer(comm::Communicator& comm, const std::optional<io::Checkpoint>& held,
                            std::int64_t step) {
  const int rank = comm.rank();
  const int world = comm.size();
  const std::int64_t mine = held ? step : -1;
  auto best = torch::tensor({static_cast<double>(mine)}, torch::kDouble);
  comm.allreduce(best, comm::ReduceOp::Max);
  PeerState state;
  state.step = static_cast<std::int64_t>(best.item<double>());
  if (state.step < 0) return state;
  // The lowest rank holding that step sends.
  auto source = torch::tensor({static_cast<double>(mine == state.step ? rank : world)}, torch::kDouble);
  comm.allreduce(source, comm::ReduceOp::Min);
  state.source_rank = static_cast<int>(source.item<double>());
  const bool sending = rank == state.source_rank;

  nlohmann::json header;
  if (sending) {
    header["metadata"] = held->metadata();
    for (const auto& [name, tensor] : held->tensors()) {
      header["tensors"][name] = {{"dtype", static_cast<int>(tensor.scalar_type())},
                                 {"shape", tensor.sizes().vec()}};
    }
  }
  const auto header_text = broadcast_bytes(comm, sending ? header.dump() : std::string(), state.source_rank);
  header = nlohmann::json::parse(header_text);
  state.bytes = header_text.size();
  io::Checkpoint received;
  received.set_metadata(header.at("metadata"));
  for (const auto& [dtype, entries] : by_dtype(header.at("tensors"))) {
    std::int64_t total = 0;
    for (const auto& e : entries) total += e.numel;
    torch::Tensor flat;
    if (sending) {
      std::vector<torch::Tensor> parts;
      for (const auto& e : entries) parts.push_back(held->tensor(e.name).reshape({-1}));
      flat = torch::cat(parts);
    } else {
      flat = torch::empty({total}, torch::TensorOptions(dtype));
    }
    comm.broadcast(flat, state.source_rank);
    state.bytes += static_cast<std::uint64_t>(total) * flat.element_size();
    if (sending) continue;
    std::int64_t offset = 0;
    for (const auto& e : entries) {
      received.set_tensor(e.name, flat.narrow(0, offset, e.numel).view(e.shape));
      offset += e.numel;
    }
  }
  state.checkpoint = sending ? held : std::optional<io::Checkpoint>(std::move(received));
  return state;
}

}  // namespace dtrain::train
