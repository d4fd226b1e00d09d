// The single-process step: forward, backward (in micro-batches when accumulating), update.
#include "dtrain/parallel/local/LocalStrategy.h"

#include <torch/torch.h>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

LocalStrategy::LocalStrategy(StrategyContext context) : ReplicaStrategy(std::move(context)) {}

StepResult LocalStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  StepResult result;
  result.samples = batch.size();
  auto network = model_ptr();
  const ForwardFn forward = [network](const torch::Tensor& x) { return network->forward(x); };
  // An optimizer that evaluates the closure several times (L-BFGS) adds up each evaluation's phases.
  result.closure_evaluations = step_optimizer([&]() -> torch::Tensor {
    optimizer().zero_grad();
    auto step =
        forward_backward(forward, loss(), batch.inputs, batch.targets, parallel_config().accumulation_steps);
    result.timing.forward += step.forward_seconds;
    result.timing.backward += step.backward_seconds;
    result.outputs = step.outputs;
    result.loss = step.loss.item<double>();
    return step.loss;
  });
  // No communication: bytes_sent stays 0, even with a communicator (each rank trains its own copy).
  result.timing.set_update_to_rest(util::seconds_since(start));
  return result;
}

DTRAIN_REGISTER_STRATEGY(local,
                         StrategyInfo{"local",
                                      "one process, no communication: the baseline every strategy must match",
                                      /*exact=*/true, /*needs_communicator=*/false,
                                      [](StrategyContext c) -> std::unique_ptr<Strategy> {
                                        return std::make_unique<LocalStrategy>(std::move(c));
                                      }});

}  // namespace dtrain::parallel
