// Splitting a batch into micro-batches and accumulating their gradients.
#include "dtrain/parallel/MicroBatches.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

std::vector<std::pair<std::int64_t, std::int64_t>> micro_batch_ranges(std::int64_t batch_size,
                                                                      int micro_batches) {
  if (micro_batches < 1) {
    throw std::invalid_argument(
        fmt::format("accumulation_steps must be at least 1, got {}; 1 means no accumulation", micro_batches));
  }
  if (batch_size < micro_batches) {
    throw std::invalid_argument(
        fmt::format("a batch of {} samples cannot be split into {} micro-batches; lower accumulation_steps "
                    "or raise the batch size",
                    batch_size, micro_batches));
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  const std::int64_t base = batch_size / micro_batches;
  const std::int64_t longer = batch_size % micro_batches;
  std::int64_t begin = 0;
  for (int i = 0; i < micro_batches; ++i) {
    const std::int64_t size = base + (i < longer ? 1 : 0);
    ranges.emplace_back(begin, begin + size);
    begin += size;
  }
  return ranges;
}

AccumulatedBatch forward_backward(const ForwardFn& forward, const LossFn& loss, const torch::Tensor& inputs,
                                  const torch::Tensor& targets, int micro_batches,
                                  const BeforeBackwardFn& before_backward, const torch::Tensor& loss_scale) {
  if (inputs.dim() == 0 || targets.dim() == 0 || inputs.size(0) != targets.size(0)) {
    throw std::invalid_argument(
        fmt::format("inputs {} and targets {} must share their first (batch) dimension",
                    c10::str(inputs.sizes()), c10::str(targets.sizes())));
  }
  const std::int64_t n = inputs.size(0);
  const auto ranges = micro_batch_ranges(n, micro_batches);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(ranges.size());
  AccumulatedBatch result;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const auto [begin, end] = ranges[i];
    const bool whole = ranges.size() == 1;
    const auto x = whole ? inputs : inputs.slice(0, begin, end);
    const auto y = whole ? targets : targets.slice(0, begin, end);
    const auto forward_start = util::Clock::now();
    auto out = forward(x);
    auto l = loss(out, y);
    if (l.numel() != 1) {
      throw std::invalid_argument(
          fmt::format("the loss function returned a tensor of shape {}; it must reduce to one value (mean "
                      "over the batch)",
                      c10::str(l.sizes())));
    }
    if (!whole) l = l * (static_cast<double>(end - begin) / static_cast<double>(n));
    const auto detached = l.detach().reshape({});
    result.loss = result.loss.defined() ? result.loss + detached : detached;
    const auto backward_start = util::Clock::now();
    result.forward_seconds += util::seconds_between(forward_start, backward_start);
    if (before_backward) before_backward(static_cast<int>(i), i + 1 == ranges.size(), result.loss);
    if (loss_scale.defined()) l = l * loss_scale.reshape({});
    l.backward();
    result.backward_seconds += util::seconds_since(backward_start);
    outputs.push_back(out.detach());
  }
  result.outputs = outputs.size() == 1 ? outputs.front() : torch::cat(outputs);
  return result;
}

}  // namespace dtrain::parallel
