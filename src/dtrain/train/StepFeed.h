// StepFeed: the batches of one training step on this rank. Usually one batch of this rank's shard;
// under a strategy whose data lives on graph nodes (decentralized), one loader per node this rank
// hosts, and as many batches per node as the strategy consumes in a step (CADMM's primal steps),
// concatenated node by node: rows [(h*P + b)*B, (h*P + b + 1)*B) are batch b of local node h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Batch.h"
#include "dtrain/data/Dataset.h"
#include "dtrain/data/Loader.h"
#include "dtrain/data/Partition.h"

namespace dtrain::train {

class StepFeed {
 public:
  // One loader per shard (the data holders this rank hosts), each drawing batches_per_step batches
  // a step. Every shard's sampler pads to the largest holder's share, so all draw alike.
  // `for_gpu`: batches made in pinned memory, data.loader_threads' auto for a GPU (data::loader_threads).
  StepFeed(std::shared_ptr<const data::Dataset> train, const std::vector<data::Shard>& shards,
           const config::DataConfig& data, std::uint64_t seed, int batches_per_step, bool for_gpu = false);

  // Whole steps in an epoch: the batches of an epoch / batches_per_step (a remainder is dropped).
  std::int64_t steps_per_epoch() const;
  // Begins `epoch` at step `first_step` of it (a checkpoint's position). `rest`, when given, holds
  // for each shard the samples it reads from there to the epoch's end (Note [An epoch across a size
  // change] in data/EpochRemainder.h).
  void start_epoch(std::int64_t epoch, std::int64_t first_step = 0,
                   const std::vector<torch::Tensor>* rest = nullptr);
  // Whole steps in the epoch begun last: steps_per_epoch(), or fewer or more with `rest`.
  std::int64_t epoch_steps() const;
  // The next step's batches, or nothing when the epoch has no whole step left.
  std::optional<data::Batch> next();

 private:
  std::vector<std::unique_ptr<data::Loader>> loaders_;
  int batches_per_step_;
  std::int64_t next_step_ = 0;
};

}  // namespace dtrain::train
