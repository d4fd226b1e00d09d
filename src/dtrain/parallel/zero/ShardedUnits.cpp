// The zero strategy's units and storage handling; see ShardedUnits.h.
#include "dtrain/parallel/zero/ShardedUnits.h"

#include <c10/core/StorageImpl.h>
#include <c10/util/strides.h>
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "dtrain/models/TiedParameters.h"

namespace dtrain::parallel::zero {

// Note [Freeing storage]
// FairScale's FSDP frees a module's full parameters after its forward with
// `p._full_param_padded.storage().resize_(0)` and, before its backward, resizes the storage back
// and all-gathers into it (_free_full_params, _rebuild_full_params). The tensors autograd saved
// in forward (a Linear's weight, or a transpose of it) are views of that same storage, so they
// see the gathered values again without being saved anew. LibTorch 1.13 offers no public
// storage resize in C++, so we do the equivalent on the c10::StorageImpl: swap its DataPtr for
// an empty one and set its size to 0 bytes (free), then point it at a pooled buffer of the full
// size (lend_storage, Note [Reused buffers]). Tensor metadata (sizes, strides, offsets) is untouched,
// so every parameter and saved tensor stays valid as long as nobody reads it while freed.

std::vector<UnitLayout> plan_units(const models::Network& network, int world) {
  TORCH_INTERNAL_ASSERT(world >= 1);
  std::unordered_map<const void*, std::string> names;
  for (const auto& p : network.named_parameters(/*recurse=*/true))
    names.emplace(p.value().unsafeGetTensorImpl(), p.key());
  std::set<const void*> seen;
  std::vector<UnitLayout> units;
  const auto stages = network.stages();
  for (std::size_t s = 0; s < stages.size(); ++s) {
    UnitLayout unit;
    unit.stage = static_cast<int>(s);
    for (const auto& p : stages[s].ptr()->parameters(/*recurse=*/true)) {
      const auto* key = p.unsafeGetTensorImpl();
      const auto name = names.count(key) ? names.at(key) : fmt::format("stage {} parameter", s);
      if (!seen.insert(key).second) continue;  // tied: its first stage's (Note [Tied parameters under zero])
      if (!p.requires_grad()) {
        throw std::invalid_argument(fmt::format(
            "parallel.strategy zero: parameter '{}' is frozen (model.freeze); zero shards every parameter "
            "with its gradient, so leave model.freeze out or use parallel.strategy: data_parallel",
            name));
      }
      if (!unit.params.empty()) {
        const auto& first = unit.params.front().param;
        if (first.scalar_type() != p.scalar_type() || first.device() != p.device()) {
          throw std::invalid_argument(fmt::format(
              "parallel.strategy zero: parameter '{}' is {} on {}, the rest of its stage {} on {}; a stage's "
              "parameters share one flat buffer, so give them one dtype and device",
              name, c10::toString(p.scalar_type()), p.device().str(), c10::toString(first.scalar_type()),
              first.device().str()));
        }
      }
      unit.params.push_back(UnitParameter{name, p, unit.numel, p.numel()});
      unit.numel += p.numel();
    }
    if (unit.params.empty()) continue;
    unit.shard = (unit.numel + world - 1) / world;
    unit.padded = unit.shard * world;
    units.push_back(std::move(unit));
  }
  for (const auto& [key, name] : names) {
    if (!seen.count(key)) {
      throw std::invalid_argument(fmt::format(
          "parallel.strategy zero: parameter '{}' belongs to no stage of the model (Network::stages()); zero "
          "gathers parameters stage by stage, so use parallel.strategy: data_parallel for this model",
          name));
    }
  }
  return units;
}

std::vector<std::vector<std::size_t>> borrowed_units(const models::Network& network,
                                                     const std::vector<UnitLayout>& units) {
  std::unordered_map<const void*, std::size_t> owner;
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (const auto& p : units[u].params) owner.emplace(p.param.unsafeGetTensorImpl(), u);
  }
  const auto stages = network.stages();
  std::vector<std::vector<std::size_t>> borrowed(stages.size());
  for (std::size_t s = 0; s < stages.size(); ++s) {
    std::vector<const void*> used;
    for (const auto& p : stages[s].ptr()->parameters(/*recurse=*/true))
      used.push_back(p.unsafeGetTensorImpl());
    for (const auto& [name, user] : models::tied_parameter_users(*stages[s].ptr()))
      used.push_back(user->tied_parameter().unsafeGetTensorImpl());
    for (const auto* key : used) {
      const auto it = owner.find(key);
      if (it == owner.end() || units[it->second].stage == static_cast<int>(s)) continue;
      auto& list = borrowed[s];
      if (std::find(list.begin(), list.end(), it->second) == list.end()) list.push_back(it->second);
    }
  }
  return borrowed;
}

torch::Tensor alias(const torch::Tensor& buffer, std::int64_t offset, torch::IntArrayRef sizes) {
  auto out = torch::empty({0}, buffer.options().requires_grad(false));
  out.set_(buffer.storage(), buffer.storage_offset() + offset, sizes, c10::contiguous_strides(sizes));
  return out;
}

void free_storage(const torch::Tensor& tensor) {
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
}

bool storage_allocated(const torch::Tensor& tensor) {
  return tensor.storage().nbytes() > 0;
}

torch::Tensor BufferPool::take(std::int64_t numel, const torch::TensorOptions& options) {
  const auto bytes =
      static_cast<std::size_t>(numel) * c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  Slot* slot = nullptr;
  for (auto& s : slots_) {
    if (!s.lent && s.bytes.device() == options.device() &&
        s.bytes.numel() >= static_cast<std::int64_t>(bytes)) {
      slot = &s;
      break;
    }
  }
  if (!slot && slots_.size() < keep_ && bytes <= slot_bytes_) {
    slots_.push_back(
        Slot{torch::empty({static_cast<std::int64_t>(slot_bytes_)},
                          torch::TensorOptions().dtype(torch::kUInt8).device(options.device()))});
    slot = &slots_.back();
  }
  if (!slot) return torch::empty({numel}, options.requires_grad(false));
  slot->lent = true;
  auto out = torch::empty({0}, options.requires_grad(false));
  out.set_(slot->bytes.storage(), 0, {numel}, {1});
  return out;
}

void BufferPool::give(const torch::Tensor& taken) {
  if (!taken.defined() || !taken.has_storage()) return;
  for (auto& s : slots_) {
    if (s.bytes.storage().is_alias_of(taken.storage())) {
      TORCH_INTERNAL_ASSERT(s.lent, "a pooled buffer was given back twice");
      s.lent = false;
      return;
    }
  }
}

std::uint64_t BufferPool::kept_bytes() const {
  return static_cast<std::uint64_t>(slots_.size()) * slot_bytes_;
}

void lend_storage(const torch::Tensor& tensor, const torch::Tensor& memory, std::size_t nbytes) {
  TORCH_INTERNAL_ASSERT(memory.nbytes() >= nbytes && memory.device() == tensor.device());
  auto* storage = tensor.storage().unsafeGetStorageImpl();
  // Not owning: the pool (or `memory`, held by the caller) keeps the bytes.
  storage->set_data_ptr_noswap(at::DataPtr(memory.data_ptr(), memory.device()));
  storage->set_nbytes(nbytes);
}

std::map<std::string, torch::Tensor> split_whole(const UnitLayout& unit, const torch::Tensor& flat) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : unit.params) out[p.name] = flat.narrow(0, p.offset, p.numel).view(p.param.sizes());
  return out;
}

torch::Tensor join_whole(const UnitLayout& unit, const std::map<std::string, torch::Tensor>& whole,
                         const std::string& what) {
  TORCH_INTERNAL_ASSERT(!unit.params.empty());
  const auto& first = unit.params.front().param;
  auto flat = torch::zeros({unit.padded}, first.options().requires_grad(false));
  for (const auto& p : unit.params) {
    const auto it = whole.find(p.name);
    if (it == whole.end()) {
      throw std::invalid_argument(fmt::format(
          "checkpoint: {} of parameter '{}' is missing while others of its stage have it; the file "
          "is incomplete",
          what, p.name));
    }
    if (it->second.numel() != p.numel) {
      throw std::invalid_argument(
          fmt::format("checkpoint: {} of parameter '{}' has shape {}, the parameter {}", what, p.name,
                      c10::str(it->second.sizes()), c10::str(p.param.sizes())));
    }
    flat.narrow(0, p.offset, p.numel).copy_(it->second.reshape({-1}));
  }
  return flat;
}

namespace {

constexpr const char* kOptimizerPrefix = "optimizer/";
const std::vector<std::string> kStateFields{"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

}  // namespace

std::map<std::string, torch::Tensor> whole_optimizer_state(const UnitLayout& unit,
                                                           const std::string& unit_key,
                                                           const std::map<std::string, torch::Tensor>& state,
                                                           comm::Communicator* group) {
  std::map<std::string, torch::Tensor> out;
  const std::string prefix = kOptimizerPrefix + unit_key + "/";
  // Every member of the group has the same keys in the same (sorted) order: the gathers match.
  for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    const auto field = it->first.substr(prefix.size());
    if (field == "step") {
      for (const auto& p : unit.params) out[kOptimizerPrefix + p.name + "/step"] = it->second;
      continue;
    }
    auto whole = it->second.contiguous();
    if (group && group->size() > 1) {
      whole = torch::empty({unit.padded}, it->second.options());
      group->allgather(it->second.contiguous(), whole);
    }
    for (const auto& [name, value] : split_whole(unit, whole))
      out[kOptimizerPrefix + name + "/" + field] = value;
  }
  return out;
}

void add_shard_optimizer_entries(const UnitLayout& unit, const std::string& unit_key, int index,
                                 const io::Checkpoint& checkpoint,
                                 std::map<std::string, torch::Tensor>& entries) {
  const std::string key = kOptimizerPrefix + unit_key + "/";
  std::optional<std::int64_t> step;
  for (const auto& p : unit.params) {
    const auto name = kOptimizerPrefix + p.name + "/step";
    if (!checkpoint.contains(name)) continue;
    const auto s = checkpoint.tensor(name).item<std::int64_t>();
    if (step && *step != s) {
      throw std::invalid_argument(fmt::format(
          "checkpoint: the parameters of stage {} took different numbers of optimizer steps ({} and {} for "
          "'{}'); a sharded stage keeps one step count, so resume with the strategy it was saved with",
          unit.stage, *step, s, p.name));
    }
    step = s;
  }
  if (step) entries[key + "step"] = torch::tensor(*step);
  for (const auto& field : kStateFields) {
    std::map<std::string, torch::Tensor> whole;
    for (const auto& p : unit.params) {
      const auto name = kOptimizerPrefix + p.name + "/" + field;
      if (checkpoint.contains(name)) whole[p.name] = checkpoint.tensor(name);
    }
    if (whole.empty()) continue;
    const auto flat = join_whole(unit, whole, "optimizer state " + field);
    entries[key + field] = flat.narrow(0, index * unit.shard, unit.shard).clone();
  }
}

}  // namespace dtrain::parallel::zero
