// The in-memory image data set; see Dataset.h.
#include "dtrain/data/Dataset.h"

#include "dtrain/data/Random.h"

namespace dtrain::data {

ImageDataset::ImageDataset(std::string name, torch::Tensor images, torch::Tensor labels,
                           std::int64_t num_classes)
    : name_(std::move(name)),
      images_(std::move(images)),
      labels_(std::move(labels)),
      num_classes_(num_classes) {
  TORCH_INTERNAL_ASSERT(images_.dim() == 4, name_, ": images must be (N, C, H, W), found ", images_.sizes());
  TORCH_INTERNAL_ASSERT(images_.scalar_type() == torch::kUInt8 || images_.scalar_type() == torch::kFloat);
  TORCH_INTERNAL_ASSERT(labels_.dim() == 1 && labels_.scalar_type() == torch::kLong);
  TORCH_INTERNAL_ASSERT(labels_.size(0) == images_.size(0), name_, ": ", images_.size(0), " images but ",
                        labels_.size(0), " labels");
  images_ = images_.contiguous();
  labels_ = labels_.contiguous();
  if (images_.size(0) > 0) stats_ = channel_stats(images_);
}

std::vector<std::int64_t> ImageDataset::input_shape() const {
  return {images_.size(1), images_.size(2), images_.size(3)};
}

void ImageDataset::set_transform(const ImageTransformOptions& options) {
  TORCH_CHECK(options.random_crop_padding >= 0, "data.random_crop_padding: expected >= 0, found ",
              options.random_crop_padding);
  transform_ = options;
}

void ImageDataset::set_stats(const ChannelStats& stats) {
  TORCH_CHECK(static_cast<std::int64_t>(stats.mean.size()) == images_.size(1) &&
                  stats.std.size() == stats.mean.size(),
              name_, ": statistics for ", stats.mean.size(), " channels given to images with ",
              images_.size(1), " channels");
  stats_ = stats;
}

ImageDataset ImageDataset::head(std::int64_t n) const {
  TORCH_CHECK(n >= 0, name_, ": subset size must be >= 0, found ", n);
  ImageDataset out = *this;
  const std::int64_t keep = std::min(n, size());
  out.images_ = images_.narrow(0, 0, keep);
  out.labels_ = labels_.narrow(0, 0, keep);
  return out;
}

Batch ImageDataset::get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const {
  auto x = images_.index_select(0, indices).to(torch::kFloat);
  if (images_.scalar_type() == torch::kUInt8) x.div_(255.0);
  if (transform_.random_crop_padding > 0 || transform_.horizontal_flip) {
    auto gen = make_generator(augment_seed);
    // torchvision's order: crop on raw pixels (zero padding is black), flip, then normalise.
    if (transform_.random_crop_padding > 0) x = random_crop(x, transform_.random_crop_padding, gen);
    if (transform_.horizontal_flip) x = random_horizontal_flip(x, gen);
  }
  if (transform_.normalize && !stats_.mean.empty()) x = normalize(x, stats_);
  return Batch{x.contiguous(), labels_.index_select(0, indices)};
}

}  // namespace dtrain::data
