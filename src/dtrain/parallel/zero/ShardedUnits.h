// The flat, sharded layout behind the `zero` strategy: the model's parameters grouped into units
// (one per stage of models::Network that has parameters), each unit's parameters one flat buffer
// padded to a multiple of the world size and split into equal shards, one per rank. Also the
// storage tricks stage 3 needs (freeing a unit's full buffer and bringing it back) and the
// conversions between a unit's flat shard and whole tensors by parameter name (checkpoints).
// Internal to the zero strategy.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Network.h"

namespace dtrain::parallel::zero {

struct UnitParameter {
  std::string name;     // dotted, as the model's named_parameters() reports it
  torch::Tensor param;  // the module's parameter; its data lives in the unit's full buffer
  std::int64_t offset;  // elements into the unit's flat buffer
  std::int64_t numel;
};

// Note [Padding is explicit]
// A unit of `numel` elements is padded to `padded` = world x `shard`, shard = ceil(numel / world):
// the last rank's shard (or the last few ranks' when numel < world) ends in padding elements,
// which are zero in the parameters and gradients, so every optimizer we allow (sgd, adam, adamw:
// element-wise, and zero stays zero under each) leaves them zero. They are real bytes on every
// rank and memory_footprint() counts them. Nothing is ever replicated instead of sharded.
struct UnitLayout {
  int stage = 0;  // index into Network::stages()
  std::vector<UnitParameter> params;
  std::int64_t numel = 0;   // sum of the parameters' elements
  std::int64_t padded = 0;  // numel rounded up to a multiple of the world size
  std::int64_t shard = 0;   // padded / world: the elements each rank owns
};

// The units of `network` for `world` ranks, in forward order. A parameter two stages share (tied
// embeddings) belongs to the unit of the first stage that registers it, once: its gradient, which
// autograd sums over every use, is that unit's. Throws std::invalid_argument, naming the parameter,
// for a parameter outside every stage, one that does not require gradients (model.freeze) or one
// of another dtype or device than its unit.
std::vector<UnitLayout> plan_units(const models::Network& network, int world);

// Note [Tied parameters under zero]
// A stage that computes with a parameter of another stage's unit (a tied output layer, a parameter
// registered by two stages) borrows that unit: stage 3 gathers it before the stage's forward and
// keeps it gathered until the unit's own gradients are reduced, after every use's backward (the
// parameter's gradient accumulator runs once, when all uses have added in). Returns, per stage of
// network.stages(), the indices into `units` of the units it borrows.
std::vector<std::vector<std::size_t>> borrowed_units(const models::Network& network,
                                                     const std::vector<UnitLayout>& units);

// A tensor of `sizes` over `buffer`'s storage from element `offset`, sharing it without being an
// autograd view (LibTorch's optimizers call detach_() on gradients, which autograd refuses on views).
torch::Tensor alias(const torch::Tensor& buffer, std::int64_t offset, torch::IntArrayRef sizes);

// Stage 3's way of freeing a unit's full parameters while autograd still holds tensors saved from
// them: the storage keeps its identity (every parameter and saved tensor refers to the same
// c10::StorageImpl) but gives its bytes back; lend_storage() (below) gives it bytes again, which
// the all-gather then fills. See Note [Freeing storage] in ShardedUnits.cpp.
void free_storage(const torch::Tensor& tensor);
bool storage_allocated(const torch::Tensor& tensor);

// Note [Reused buffers]
// A step's transient buffers (the units' flat gradients, the reduce-scatters' outputs, the shard
// copies the all-gathers send, stage 3's gathered units) are the same few sizes every step. Taken
// from the allocator and freed each time, glibc's malloc keeps the freed ones below its sliding
// mmap threshold (up to 32 MiB) in the heap, where they stay resident and fragment it. A pool
// keeps `keep` slots of the kind's largest size instead, allocated on first use and lent out again
// every step, as DeepSpeed's stage 2 keeps its contiguous gradient and reduce buckets and
// PyTorch's caching allocator its blocks. A request when every kept slot is
// lent (stage 3 gathering every unit for evaluation or a checkpoint) gets fresh memory of its own
// size, freed when its tensor goes: the pool never grows past `keep`.
// Measured (2-vCPU VM, ZeRO, 47M-parameter mlp): without pools, peak RSS up to 128 MiB higher.
class BufferPool {
 public:
  BufferPool(std::size_t keep, std::size_t slot_bytes) : keep_(keep), slot_bytes_(slot_bytes) {}
  // `numel` elements of options' dtype on its device, over a free kept slot (its first bytes) when
  // one is large enough; not an autograd view. Uninitialised.
  torch::Tensor take(std::int64_t numel, const torch::TensorOptions& options);
  // Gives back the slot `taken` (a tensor take() returned) lies over; memory of its own is freed
  // with its last reference.
  void give(const torch::Tensor& taken);
  // The bytes of the kept slots.
  std::uint64_t kept_bytes() const;

 private:
  struct Slot {
    torch::Tensor bytes;  // uint8, slot_bytes_ long
    bool lent = false;
  };
  std::size_t keep_;
  std::size_t slot_bytes_;
  std::vector<Slot> slots_;
};

// Points `tensor`'s storage (freed, free_storage()) at `memory`'s bytes without owning them: stage
// 3's gathered unit lives in a pool's slot, and free_storage() lets go of it again.
void lend_storage(const torch::Tensor& tensor, const torch::Tensor& memory, std::size_t nbytes);

// The whole tensors of a unit's parameters from its flat (padded) buffer: name -> tensor shaped
// like the parameter (views of `flat`).
std::map<std::string, torch::Tensor> split_whole(const UnitLayout& unit, const torch::Tensor& flat);
// The flat padded buffer of a unit from whole tensors by parameter name; throws
// std::invalid_argument naming `what` and the parameter when one is missing or misshapen.
torch::Tensor join_whole(const UnitLayout& unit, const std::map<std::string, torch::Tensor>& whole,
                         const std::string& what);

// A unit's optimizer state in a checkpoint's layout (Note [Checkpoint layout]): whole tensors by
// parameter name. `state` is named_optimizer_state() over shards named `unit_key` (entries
// "optimizer/<unit_key>/<field>"); each field is gathered over `group` (the unit's shard group,
// ranked by shard index; collective over it, nullptr for a unit in one shard) and cut into
// "optimizer/<parameter>/<field>", the step count written under every parameter of the unit.
std::map<std::string, torch::Tensor> whole_optimizer_state(const UnitLayout& unit,
                                                           const std::string& unit_key,
                                                           const std::map<std::string, torch::Tensor>& state,
                                                           comm::Communicator* group);
// The inverse for shard `index`: adds "optimizer/<unit_key>/<field>" entries (for
// load_named_optimizer_state() over the shards) from `checkpoint`'s whole tensors. Throws
// std::invalid_argument when the unit's parameters took different numbers of steps or a field is
// missing or misshapen for some of them.
void add_shard_optimizer_entries(const UnitLayout& unit, const std::string& unit_key, int index,
                                 const io::Checkpoint& checkpoint,
                                 std::map<std::string, torch::Tensor>& entries);

}  // namespace dtrain::parallel::zero
