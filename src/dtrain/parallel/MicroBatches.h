// Gradient accumulation shared by the strategies: a batch split into micro-batches whose losses
// are weighted so that the accumulated gradient equals the gradient of the whole batch's mean loss.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "dtrain/optim/Loss.h"

namespace dtrain::parallel {

// A model's forward pass (torch::nn::Module has no virtual forward()).
using ForwardFn = std::function<torch::Tensor(const torch::Tensor& inputs)>;
using LossFn = optim::LossFn;

// The [begin, end) rows of each of `micro_batches` near-equal slices of a batch of `batch_size`
// (the first batch_size % micro_batches slices one row longer). Throws std::invalid_argument when
// micro_batches < 1 or the batch has fewer samples than micro-batches.
std::vector<std::pair<std::int64_t, std::int64_t>> micro_batch_ranges(std::int64_t batch_size,
                                                                      int micro_batches);

struct AccumulatedBatch {
  torch::Tensor loss;     // 0-dim, detached: the whole batch's mean loss
  torch::Tensor outputs;  // detached, batch first
  // Wall time, summed over the micro-batches: the forward passes with their losses, and the
  // backward passes with before_backward (and whatever backward hooks launch).
  double forward_seconds = 0.0;
  double backward_seconds = 0.0;
};

// Forward and backward over `micro_batches` slices of the batch. Each micro-batch's mean loss is
// scaled by its share of the samples (1/k for equal slices) before backward, so gradients sum to
// the whole batch's. `before_backward(i, last)` runs before micro-batch i's backward (a
// data-parallel strategy turns all-reduce on for the last one only), with the batch's loss so far
// (0-dim, detached; on the last micro-batch, the whole batch's mean loss). backward() runs on the
// loss times `loss_scale` where it is defined (fp16's dynamic loss scale, a one-element tensor on
// the loss's device; MixedPrecision.h), so the gradients come out multiplied by it; the losses
// reported stay unscaled.
using BeforeBackwardFn = std::function<void(int index, bool last, const torch::Tensor& loss_so_far)>;
AccumulatedBatch forward_backward(const ForwardFn& forward, const LossFn& loss, const torch::Tensor& inputs,
                                  const torch::Tensor& targets, int micro_batches,
                                  const BeforeBackwardFn& before_backward = nullptr,
                                  const torch::Tensor& loss_scale = {});

}  // namespace dtrain::parallel
