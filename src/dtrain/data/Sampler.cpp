// The distributed sampler; see Sampler.h.
#include "dtrain/data/Sampler.h"

#include "dtrain/data/Random.h"

namespace dtrain::data {

DistributedSampler::DistributedSampler(Shard shard, SamplerOptions options, std::uint64_t seed)
    : shard_(std::move(shard)), options_(options), seed_(seed) {
  TORCH_CHECK(options_.batch_size >= 1, "data.batch_size: expected >= 1, found ", options_.batch_size);
  TORCH_INTERNAL_ASSERT(shard_.indices.defined() && !shard_.rank_sizes.empty());
  switch (options_.equalize) {
    case Equalize::pad:
      samples_per_epoch_ = shard_.max_size();
      break;
    case Equalize::drop:
      samples_per_epoch_ = shard_.min_size();
      break;
    case Equalize::none:
      samples_per_epoch_ = shard_.size();
      break;
  }
  TORCH_CHECK(shard_.size() > 0 || samples_per_epoch_ == 0, "[rank ", shard_.rank, "/", shard_.world,
              "] holds no samples but must draw ", samples_per_epoch_,
              " per epoch to keep step with the other ranks; choose a partition that gives every rank data");
  const std::int64_t b = options_.batch_size;
  batches_per_epoch_ = options_.drop_last ? samples_per_epoch_ / b : (samples_per_epoch_ + b - 1) / b;
  TORCH_CHECK(batches_per_epoch_ > 0 || samples_per_epoch_ == 0, "data.batch_size: ", b,
              " is larger than the ", samples_per_epoch_,
              " samples each rank draws per epoch, and data.drop_last leaves no batch; "
              "use a smaller batch size or set data.drop_last to false");
}

torch::Tensor DistributedSampler::epoch_order(std::int64_t epoch) const {
  auto own = shard_.indices;
  if (options_.shuffle && own.size(0) > 1) {
    auto gen = make_generator(derive_seed(
        seed_, {0x5a3, static_cast<std::uint64_t>(shard_.rank), static_cast<std::uint64_t>(epoch)}));
    own = own.index_select(0, torch::randperm(own.size(0), gen, torch::kLong));
  }
  if (samples_per_epoch_ <= own.size(0)) return own.narrow(0, 0, samples_per_epoch_);
  const std::int64_t copies = (samples_per_epoch_ + own.size(0) - 1) / own.size(0);
  return own.repeat({copies}).narrow(0, 0, samples_per_epoch_);
}

torch::Tensor DistributedSampler::batch_indices(const torch::Tensor& order, std::int64_t batch) const {
  const std::int64_t begin = batch * options_.batch_size;
  TORCH_CHECK(batch >= 0 && begin < order.size(0), "sampler: batch ", batch, " outside an epoch of ",
              order.size(0), " samples in batches of ", options_.batch_size);
  return order.narrow(0, begin, std::min(options_.batch_size, order.size(0) - begin));
}

std::uint64_t DistributedSampler::batch_seed(std::int64_t epoch, std::int64_t batch) const {
  return derive_seed(seed_, {0xa06, static_cast<std::uint64_t>(shard_.rank),
                             static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(batch)});
}

}  // namespace dtrain::data
