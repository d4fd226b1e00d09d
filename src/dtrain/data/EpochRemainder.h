// The rest of an epoch when the number of data holders changes within it.
//
// Note [An epoch across a size change]
// A run that changes its number of data holders mid-epoch (an elastic job losing or gaining a
// host, a --resume on another number of workers) finishes the epoch on the samples it had left,
// each read once. Those samples are the unread batches of the holders the epoch began with
// (every holder's DistributedSampler order, recomputed from the seed), laid out as those holders
// would have read them: batch by batch, holder by holder. The new holders read that sequence on:
// step j gives holder h the B samples at (j * holders + h) * B, so the sequence is consumed in
// whole steps, and at the same number of holders it hands every holder the very batches it would
// have read. A later change within the same epoch continues from the same sequence, after the
// samples already read; a checkpoint keeps where (RemainderPosition).
// What is left after the whole steps (r < holders * B samples) follows data.drop_last and
// data.equalize as any epoch's last batch does: drop_last drops it; otherwise pad gives every
// holder ceil(r / holders) of them, the shortfall taken again from the sequence's start (pad
// repeats samples to keep the holders in step), drop gives every holder floor(r / holders) and
// drops the rest, and join deals them out as evenly as they go (the join schedule weighs the
// holders' gradients by their samples). The trainer counts the epoch's steps as the new size counts
// them: the epoch ends at its usual step where what is left allows (Trainer::continue_epoch).
// torchrun's elastic agent and DeepSpeed leave the data to the user's sampler. torchft shards the
// data over the most replica groups a job may have and calls its sampler lossy: a group that is
// down leaves its share unread (torchft/data.py); a group that rejoins may drop batches.
#pragma once

#include "dtrain/data/Partition.h"
#include "dtrain/data/Sampler.h"

#include <cstdint>
#include <vector>

namespace dtrain::data {

// Where an epoch read across a size change stands: it began with `from_holders` holders, which read
// `from_batch` batches each; since then the holders have read `read` samples of what was left.
struct RemainderPosition {
  int from_holders = 0;
  std::int64_t from_batch = 0;
  std::int64_t read = 0;
};

// The samples left after the first `from_batch` batches of `epoch` were read by one holder per
// shard of `shards` (partition_all's, in holder order), in the order those holders read them.
torch::Tensor unread_samples(const std::vector<Shard>& shards, const SamplerOptions& options,
                             std::uint64_t seed, std::int64_t epoch, std::int64_t from_batch);

// How `holders` holders read `left`, the samples an epoch has left: whole steps, then the last
// samples by the rule of the Note.
class RemainderDeal {
 public:
  RemainderDeal(torch::Tensor left, int holders, const SamplerOptions& options);

  // Steps the holders take, counting a last, partial one.
  std::int64_t steps() const { return steps_; }
  // The samples each holder reads, in holder order.
  const std::vector<std::int64_t>& sizes() const { return sizes_; }
  // (sizes()[holder]) the samples holder `holder` reads, in order.
  torch::Tensor indices(int holder) const;

 private:
  torch::Tensor left_;
  int holders_;
  std::int64_t batch_size_;
  std::int64_t whole_steps_ = 0;
  std::vector<std::int64_t> last_begin_;  // each holder's first sample of the last step, in left_ (cyclic)
  std::vector<std::int64_t> sizes_;
  std::int64_t steps_ = 0;
};

}  // namespace dtrain::data
