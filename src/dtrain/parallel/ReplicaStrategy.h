// What the strategies in which every rank holds the whole model share (local, data_parallel, and
// the gradient-compressing ones to come): one optimizer over all parameters, evaluation on the
// rank's own copy, checkpoints of the whole model and optimizer by name.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

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
  // optim/closure_evaluations: the closure evaluations of every step so far in this process.
  std::map<std::string, double> metrics() override;
  // The model's parameters and gradients (data_parallel's flat buckets, which the gradients view,
  // included) and the optimizer's state.
  MemoryFootprint memory_footprint() const override;
  MemoryFootprint planned_footprint() const override;
  // The optimizer over the model's parameters (what train.cuda_graph hands its learning rate to).
  torch::optim::Optimizer& optimizer() { return *optimizer_; }

 protected:
  // Builds the optimizer over every parameter of context.model; refuses an optimizer that
  // context.precision cannot honour (check_precision_optimizer).
  explicit ReplicaStrategy(StrategyContext context);

  models::Network& model() { return *context_.model; }
  const models::NetworkPtr& model_ptr() const { return context_.model; }
  const optim::LossFn& loss() const { return context_.loss; }
  const comm::CommunicatorPtr& communicator() const { return context_.comm; }
  const config::ParallelConfig& parallel_config() const { return context_.parallel; }
  MixedPrecision& precision() { return precision_; }
  // The model's forward pass under train.precision (outputs float32).
  ForwardFn forward_fn();

  // One update around `closure` (zero_grad, forward and backward with the loss multiplied by
  // precision().loss_scale_tensor(), the strategy's gradient communication; returns the step's
  // loss): optimizer().step(closure) in fp32 and bf16. In fp16 the closure runs once on the
  // fp16-rounded weights, then precision().finish_gradients_on_device() and precision().step()
  // decide, agreed by every rank and on the device where the optimizer allows, whether the
  // optimizer steps; result.skipped and result.loss_scale say what happened, and the
  // agreement's wait counts as result.timing.communication. result.closure_evaluations counts the
  // closure's evaluations (see Note [Distributed L-BFGS]).
  void step_with(const std::function<torch::Tensor()>& closure, StepResult& result);
  std::uint64_t seed() const { return context_.seed; }

  // Note [Distributed L-BFGS]
  // L-BFGS evaluates its closure as often as its line search and tolerances decide, from the loss
  // and gradient it is given. Each rank's copy of the optimizer takes the same decisions, and so
  // the same number of evaluations and the same steps, only if every evaluation sees the same
  // global loss and gradient: the closure itself must all-reduce both (pytorch#30439; the
  // distributed-optimizer study's lesson). Reducing once per step outside the closure lets ranks' line
  // searches diverge, and a rank that evaluates once more waits forever in a collective the others never
  // join. Every replica strategy therefore passes optimizer().step() a closure that runs forward, backward
  // and the strategy's whole synchronisation, and returns the global mean loss; the reductions
  // leave identical bits on every rank, so identical optimizers stay identical. step_with counts
  // the evaluations (StepResult::closure_evaluations, optim/closure_evaluations) so that tests and
  // logs can check it.

 private:
  std::int64_t step_optimizer(const std::function<torch::Tensor()>& closure);
  void fill_lbfgs_scratch();

  StrategyContext context_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  MixedPrecision precision_;
  std::int64_t closure_evaluations_ = 0;
};

}  // namespace dtrain::parallel
