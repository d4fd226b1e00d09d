// torch's DistributedSampler for dtrain's shards: a per-epoch reshuffle of this rank's samples that
// any rank can recompute from (seed, epoch), and the same number of batches on every rank, because
// ranks that step a different number of times deadlock the gradient all-reduce.
#pragma once

#include "dtrain/data/Partition.h"

#include <cstdint>

namespace dtrain::data {

enum class Equalize {
  pad,   // every rank draws the largest share's size per epoch, cycling through its own samples (torch)
  drop,  // every rank draws the smallest share's size; the rest of a larger share waits for a later epoch
  none,  // each rank its own size: only for code that does not synchronise steps (evaluation)
};

struct SamplerOptions {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = true;  // drop a last, incomplete batch
  Equalize equalize = Equalize::pad;
};

// Where an epoch stands; a checkpoint stores it to resume mid-epoch on the exact next batch.
struct SamplerPosition {
  std::int64_t epoch = 0;
  std::int64_t batch = 0;  // the next batch to be produced
};

class DistributedSampler {
 public:
  DistributedSampler(Shard shard, SamplerOptions options, std::uint64_t seed);

  std::int64_t samples_per_epoch() const { return samples_per_epoch_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const SamplerOptions& options() const { return options_; }
  const Shard& shard() const { return shard_; }

  // (samples_per_epoch) data-set indices in this epoch's order.
  torch::Tensor epoch_order(std::int64_t epoch) const;
  // (B) indices of batch `batch` of an epoch whose order is `order`.
  torch::Tensor batch_indices(const torch::Tensor& order, std::int64_t batch) const;
  // The augmentation seed of a batch: fixed by (seed, rank, epoch, batch), whatever thread makes it.
  std::uint64_t batch_seed(std::int64_t epoch, std::int64_t batch) const;

 private:
  Shard shard_;
  SamplerOptions options_;
  std::uint64_t seed_;
  std::int64_t samples_per_epoch_ = 0;
  std::int64_t batches_per_epoch_ = 0;
};

}  // namespace dtrain::data
