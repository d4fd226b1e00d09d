// Batch-wise image transforms; see Transforms.h.
#include "dtrain/data/Transforms.h"

#include <cmath>

namespace dtrain::data {

ChannelStats channel_stats(const torch::Tensor& images) {
  TORCH_CHECK(images.dim() == 4, "channel_stats: expected images (N, C, H, W), found ", images.dim(),
              " dimensions");
  const std::int64_t n = images.size(0), c = images.size(1);
  TORCH_CHECK(n > 0, "channel_stats: the data set is empty");
  const bool bytes = images.scalar_type() == torch::kUInt8;
  auto sum = torch::zeros({c}, torch::kDouble), sum_sq = torch::zeros({c}, torch::kDouble);
  constexpr std::int64_t kChunk = 4096;
  for (std::int64_t begin = 0; begin < n; begin += kChunk) {
    auto chunk = images.narrow(0, begin, std::min(kChunk, n - begin)).to(torch::kDouble);
    if (bytes) chunk.div_(255.0);
    sum += chunk.sum({0, 2, 3});
    sum_sq += chunk.square().sum({0, 2, 3});
  }
  const double count = static_cast<double>(n * images.size(2) * images.size(3));
  ChannelStats stats;
  for (std::int64_t ch = 0; ch < c; ++ch) {
    const double mean = sum[ch].item<double>() / count;
    const double var = std::max(sum_sq[ch].item<double>() / count - mean * mean, 0.0);
    stats.mean.push_back(mean);
    // A constant channel would divide by zero; leave it unscaled instead.
    stats.std.push_back(var > 1e-12 ? std::sqrt(var) : 1.0);
  }
  return stats;
}

torch::Tensor normalize(const torch::Tensor& x, const ChannelStats& stats) {
  const auto c = static_cast<std::int64_t>(stats.mean.size());
  TORCH_INTERNAL_ASSERT(x.dim() == 4 && x.size(1) == c && stats.std.size() == stats.mean.size());
  auto opts = torch::TensorOptions().dtype(x.scalar_type());
  auto mean = torch::tensor(stats.mean, torch::kDouble).to(opts).view({1, c, 1, 1});
  auto std = torch::tensor(stats.std, torch::kDouble).to(opts).view({1, c, 1, 1});
  return (x - mean) / std;
}

torch::Tensor random_crop(const torch::Tensor& x, int padding, torch::Generator& gen) {
  TORCH_CHECK(padding >= 0, "data.random_crop_padding: expected >= 0, found ", padding);
  if (padding == 0 || x.size(0) == 0) return x;
  const std::int64_t b = x.size(0), h = x.size(2), w = x.size(3);
  auto padded = torch::constant_pad_nd(x, {padding, padding, padding, padding}, 0.0);
  auto offsets = torch::randint(0, 2 * padding + 1, {b, 2}, gen, torch::kLong);
  auto off = offsets.accessor<std::int64_t, 2>();
  auto out = torch::empty_like(x);
  for (std::int64_t i = 0; i < b; ++i) {
    out[i].copy_(padded[i].narrow(1, off[i][0], h).narrow(2, off[i][1], w));
  }
  return out;
}

torch::Tensor random_horizontal_flip(const torch::Tensor& x, torch::Generator& gen) {
  if (x.size(0) == 0) return x;
  auto flip = torch::rand({x.size(0)}, gen) < 0.5;
  return torch::where(flip.view({-1, 1, 1, 1}), x.flip({3}), x);
}

}  // namespace dtrain::data
