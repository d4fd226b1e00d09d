// One batch as the training core and every parallel strategy consume it. Classification: inputs
// (B, C, H, W) float32, already normalised and augmented; targets (B) int64 class ids. Language
// model: inputs (B, T) int64 token ids; targets (B, T) int64 next-token ids.
#pragma once

#include <torch/torch.h>

namespace dtrain::data {

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;

  std::int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

}  // namespace dtrain::data
