// Batch-wise image transforms: torchvision's RandomCrop(padding), RandomHorizontalFlip and
// Normalize, applied to a whole (B, C, H, W) float batch at once. Random draws come from the
// generator passed in, so a batch's augmentation is fixed by its seed.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace dtrain::data {

struct ChannelStats {
  std::vector<double> mean;  // one per channel
  std::vector<double> std;   // one per channel
};

// Per-channel mean and standard deviation of images (N, C, H, W), uint8 scaled to [0, 1] or float
// as stored; computed in chunks so a uint8 data set is never widened whole.
ChannelStats channel_stats(const torch::Tensor& images);

// (x - mean) / std per channel; x (B, C, H, W) float.
torch::Tensor normalize(const torch::Tensor& x, const ChannelStats& stats);

// Zero-pad each side by `padding`, then crop every sample back to (H, W) at a random offset.
torch::Tensor random_crop(const torch::Tensor& x, int padding, torch::Generator& gen);

// Mirror each sample left-right with probability 1/2.
torch::Tensor random_horizontal_flip(const torch::Tensor& x, torch::Generator& gen);

}  // namespace dtrain::data
