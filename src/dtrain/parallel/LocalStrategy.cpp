// The single-process step: forward, backward (in micro-batches when accumulating), update.
#include "dtrain/parallel/LocalStrategy.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <stdexcept>

#include "dtrain/parallel/MicroBatches.h"

namespace dtrain::parallel {

LocalStrategy::LocalStrategy(std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
                             LocalOptions options, comm::CommunicatorPtr comm)
    : module_(std::move(module)), forward_(std::move(forward)), options_(options), comm_(std::move(comm)) {
  if (!module_) throw std::invalid_argument("local strategy: the module is null; pass the model to train");
  if (!forward_)
    throw std::invalid_argument("local strategy: no forward function; pass how to run the model");
  if (options_.accumulation_steps < 1) {
    throw std::invalid_argument(
        fmt::format("parallel.accumulation_steps must be at least 1, got {}", options_.accumulation_steps));
  }
}

int LocalStrategy::rank() const {
  return comm_ ? comm_->rank() : 0;
}
int LocalStrategy::world_size() const {
  return comm_ ? comm_->size() : 1;
}

StepResult LocalStrategy::train_step(const torch::Tensor& inputs, const torch::Tensor& targets,
                                     const LossFn& loss, torch::optim::Optimizer& optimizer) {
  const auto start = std::chrono::steady_clock::now();
  StepResult result;
  result.samples = inputs.size(0);
  optimizer.step([&]() -> torch::Tensor {
    optimizer.zero_grad();
    auto batch = forward_backward(forward_, loss, inputs, targets, options_.accumulation_steps);
    result.outputs = batch.outputs;
    result.loss = batch.loss.item<double>();
    return batch.loss;
  });
  result.compute_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace dtrain::parallel
