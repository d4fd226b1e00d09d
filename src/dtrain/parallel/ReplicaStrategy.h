// What the strategies in which every rank holds the whole model share (local, data_parallel, and
// the gradient-compressing ones to come): one optimizer over all parameters, evaluation on the
// rank's own copy, checkpoints of the whole model and optimizer by name, and the accounting of the
// strategy's own communication.
#pragma once

#include <functional>
#include <memory>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/MixedPrecision.h"
#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel {

class ReplicaStrategy : public Strategy {
 public:
  void set_learning_rate(double lr) override;
  void begin_evaluation() override;
  torch::Tensor eval_forward(std::size_t model, const torch::Tensor& inputs) override;
  void end_evaluation() override;
  std::map<std::string, torch::Tensor> model_state() const override;
  void save(io::Checkpoint& checkpoint) const override;
  void load(const io::Checkpoint& checkpoint) override;
  comm::CommStats comm_stats() const override { return own_comm_; }

 protected:
  // Builds the optimizer over every parameter of context.model; refuses an optimizer that
  // context.precision cannot honour (check_precision_optimizer).
  explicit ReplicaStrategy(StrategyContext context);

  models::Network& model() { return *context_.model; }
  const models::NetworkPtr& model_ptr() const { return context_.model; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::LossFn& loss() const { return context_.loss; }
  const comm::CommunicatorPtr& communicator() const { return context_.comm; }
  const config::ParallelConfig& parallel_config() const { return context_.parallel; }
  MixedPrecision& precision() { return precision_; }
  // The model's forward pass under train.precision (outputs float32).
  ForwardFn forward_fn();

  // One update around `closure` (zero_grad, forward and backward with the loss multiplied by
  // precision().loss_scale(), the strategy's gradient communication; returns the step's loss):
  // optimizer().step(closure) in fp32 and bf16. In fp16 the closure runs once on the
  // fp16-rounded weights, then precision().finish_gradients() decides, agreed by every rank,
  // whether the optimizer steps; result.skipped and result.loss_scale say what happened, and the
  // agreement's wait counts as result.timing.communication.
  void step_with(const std::function<torch::Tensor()>& closure, StepResult& result);
  std::uint64_t seed() const { return context_.seed; }

  // Counts the communicator's traffic since `before` (a stats() snapshot taken when this
  // strategy's own communication began) as this strategy's own, and returns it (a step's
  // bytes_sent is its total().wire_bytes). The trainer does not communicate while a strategy's
  // step runs, so the difference is exactly the strategy's.
  comm::CommStats count_own_communication(const comm::CommStats& before);

 private:
  StrategyContext context_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  MixedPrecision precision_;
  comm::CommStats own_comm_;
};

}  // namespace dtrain::parallel
