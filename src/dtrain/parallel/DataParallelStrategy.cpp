// The data-parallel step: forward and backward on this rank's slice with the bucket all-reduces
// overlapping backward, finish(), then the same update on every rank.
#include "dtrain/parallel/DataParallelStrategy.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>

#include "dtrain/parallel/MicroBatches.h"

namespace dtrain::parallel {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

DataParallelStrategy::DataParallelStrategy(std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
                                           comm::CommunicatorPtr comm, DataParallelStrategyOptions options)
    : comm_(comm),
      forward_(std::move(forward)),
      options_(options),
      dp_(std::move(module), std::move(comm), options.data_parallel) {
  if (!forward_)
    throw std::invalid_argument("data_parallel strategy: no forward function; pass how to run the model");
  if (options_.accumulation_steps < 1) {
    throw std::invalid_argument(
        fmt::format("parallel.accumulation_steps must be at least 1, got {}", options_.accumulation_steps));
  }
}

StepResult DataParallelStrategy::train_step(const torch::Tensor& inputs, const torch::Tensor& targets,
                                            const LossFn& loss, torch::optim::Optimizer& optimizer) {
  const auto start = Clock::now();
  StepResult result;
  result.samples = inputs.size(0);

  if (options_.broadcast_buffers && !dp_.module().buffers(/*recurse=*/true).empty()) {
    const auto t0 = Clock::now();
    dp_.sync_buffers();
    result.comm_wait_seconds += seconds_since(t0);
  }

  // The closure holds forward, backward and the all-reduces, so an optimizer that evaluates it
  // several times (L-BFGS) sees the same global gradient and loss on every rank. The loss rides
  // along in the last gradient bucket: no collective of its own.
  optimizer.step([&]() -> torch::Tensor {
    optimizer.zero_grad();
    auto batch = forward_backward(forward_, loss, inputs, targets, options_.accumulation_steps,
                                  [&](int, bool last, const torch::Tensor& loss_so_far) {
                                    dp_.set_sync(last);
                                    if (last) dp_.carry_values(loss_so_far);
                                  });
    dp_.finish();
    result.comm_wait_seconds += dp_.last_sync_timing().finish_wait_seconds;
    auto global_loss = dp_.carried_values().reshape({});
    result.outputs = batch.outputs;
    result.loss = global_loss.item<double>();
    return global_loss;
  });
  result.compute_seconds = std::max(0.0, seconds_since(start) - result.comm_wait_seconds);
  return result;
}

}  // namespace dtrain::parallel
