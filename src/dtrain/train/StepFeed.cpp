// The batches of a step from one or several loaders; see StepFeed.h.
#include "dtrain/train/StepFeed.h"

#include <torch/torch.h>

#include <algorithm>

#include "dtrain/data/Factory.h"

namespace dtrain::train {

StepFeed::StepFeed(std::shared_ptr<const data::Dataset> train, const std::vector<data::Shard>& shards,
                   const config::DataConfig& data, std::uint64_t seed, int batches_per_step, bool for_gpu)
    : batches_per_step_(batches_per_step) {
  TORCH_INTERNAL_ASSERT(!shards.empty() && batches_per_step >= 1);
  for (const auto& shard : shards)
    loaders_.push_back(data::make_train_loader(train, shard, data, seed, for_gpu));
}

std::int64_t StepFeed::steps_per_epoch() const {
  return loaders_.front()->batches_per_epoch() / batches_per_step_;
}

std::int64_t StepFeed::epoch_steps() const {
  return loaders_.front()->epoch_batches() / batches_per_step_;
}

void StepFeed::start_epoch(std::int64_t epoch, std::int64_t first_step,
                           const std::vector<torch::Tensor>* rest) {
  TORCH_INTERNAL_ASSERT(!rest || rest->size() == loaders_.size());
  // A rank with fewer steps than the others (data.equalize: join) may resume past its last one.
  if (!rest) first_step = std::min(first_step, steps_per_epoch());
  for (std::size_t i = 0; i < loaders_.size(); ++i) {
    loaders_[i]->start_epoch(epoch, first_step * batches_per_step_, rest ? (*rest)[i] : torch::Tensor());
  }
  next_step_ = first_step;
}

std::optional<data::Batch> StepFeed::next() {
  if (next_step_ >= epoch_steps()) return std::nullopt;
  if (loaders_.size() == 1 && batches_per_step_ == 1) {
    ++next_step_;
    return loaders_.front()->next();
  }
  std::vector<torch::Tensor> inputs, targets;
  for (auto& loader : loaders_) {
    for (int b = 0; b < batches_per_step_; ++b) {
      auto batch = loader->next();
      TORCH_INTERNAL_ASSERT(batch, "a node's loader ran out within a step");
      inputs.push_back(batch->inputs);
      targets.push_back(batch->targets);
    }
  }
  ++next_step_;
  return data::Batch{torch::cat(inputs), torch::cat(targets)};
}

}  // namespace dtrain::train
