// The rest of an epoch across a size change; see EpochRemainder.h.
#include "dtrain/data/EpochRemainder.h"

#include <algorithm>

namespace dtrain::data {

torch::Tensor unread_samples(const std::vector<Shard>& shards, const SamplerOptions& options,
                             std::uint64_t seed, std::int64_t epoch, std::int64_t from_batch) {
  TORCH_INTERNAL_ASSERT(!shards.empty() && from_batch >= 0);
  std::vector<DistributedSampler> samplers;
  std::vector<torch::Tensor> orders;
  std::int64_t most = 0;
  for (const auto& shard : shards) {
    samplers.emplace_back(shard, options, seed);
    orders.push_back(samplers.back().epoch_order(epoch));
    most = std::max(most, samplers.back().batches_per_epoch());
  }
  std::vector<torch::Tensor> batches;
  for (std::int64_t b = from_batch; b < most; ++b) {
    for (std::size_t h = 0; h < samplers.size(); ++h) {
      if (b < samplers[h].batches_per_epoch()) batches.push_back(samplers[h].batch_indices(orders[h], b));
    }
  }
  return batches.empty() ? torch::empty({0}, torch::kLong) : torch::cat(batches);
}

RemainderDeal::RemainderDeal(torch::Tensor left, int holders, const SamplerOptions& options)
    : left_(std::move(left)), holders_(holders), batch_size_(options.batch_size) {
  TORCH_INTERNAL_ASSERT(holders_ >= 1 && batch_size_ >= 1 && left_.dim() == 1);
  const std::int64_t n = left_.size(0);
  const std::int64_t step = holders_ * batch_size_;
  whole_steps_ = n / step;
  const std::int64_t base = whole_steps_ * step;
  const std::int64_t r = n - base;
  const std::int64_t q = r / holders_, extra = r % holders_;
  bool partial = false;
  for (int h = 0; h < holders_; ++h) {
    std::int64_t size = 0, begin = base;
    if (r > 0 && !options.drop_last) {
      switch (options.equalize) {
        case Equalize::pad:
          size = (r + holders_ - 1) / holders_;
          begin = base + h * size;
          break;
        case Equalize::drop:
          size = q;
          begin = base + h * q;
          break;
        case Equalize::none:
          size = q + (h < extra ? 1 : 0);
          begin = base + h * q + std::min<std::int64_t>(h, extra);
          break;
      }
    }
    partial = partial || size > 0;
    last_begin_.push_back(begin);
    sizes_.push_back(whole_steps_ * batch_size_ + size);
  }
  steps_ = whole_steps_ + (partial ? 1 : 0);
}

torch::Tensor RemainderDeal::indices(int holder) const {
  TORCH_CHECK(holder >= 0 && holder < holders_, "RemainderDeal: holder ", holder, " outside 0..",
              holders_ - 1);
  const auto h = static_cast<std::size_t>(holder);
  const std::int64_t last = sizes_[h] - whole_steps_ * batch_size_;
  auto whole = (torch::arange(whole_steps_, torch::kLong) * (holders_ * batch_size_) + holder * batch_size_)
                   .unsqueeze(1) +
               torch::arange(batch_size_, torch::kLong);
  // pad's last step may run past the end of what is left: it starts again from the beginning.
  auto tail = (torch::arange(last, torch::kLong) + last_begin_[h])
                  .remainder(std::max<std::int64_t>(1, left_.size(0)));
  return left_.index_select(0, torch::cat({whole.flatten(), tail}));
}

}  // namespace dtrain::data
