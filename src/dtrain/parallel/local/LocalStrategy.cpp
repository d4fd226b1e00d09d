// The single-process step: forward, backward (in micro-batches when accumulating), update.
#include "dtrain/parallel/local/LocalStrategy.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

LocalStrategy::LocalStrategy(StrategyContext context) : ReplicaStrategy(std::move(context)) {}

StepResult LocalStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  const auto traffic_before = communicator() ? communicator()->stats() : comm::CommStats{};
  StepResult result;
  result.samples = batch.size();
  const ForwardFn forward = forward_fn();
  // An optimizer that evaluates the closure several times (L-BFGS) adds up each evaluation's phases.
  step_with(
      [&]() -> torch::Tensor {
        optimizer().zero_grad();
        auto step =
            forward_backward(forward, loss(), batch.inputs, batch.targets,
                             parallel_config().accumulation_steps, nullptr, precision().loss_scale_tensor());
        result.timing.forward += step.forward_seconds;
        result.timing.backward += step.backward_seconds;
        result.outputs = step.outputs;
        result.loss = util::DeviceScalar::of(step.loss);
        return step.loss;
      },
      result);
  // No communication: bytes_sent stays 0, even with a communicator (each rank trains its own copy),
  // except for fp16's agreement on a skipped step, one flag per step.
  result.timing.set_update_to_rest(util::seconds_since(start));
  if (communicator())
    result.bytes_sent = count_own_communication(communicator(), traffic_before).total().wire_bytes;
  return result;
}

std::vector<EvalModel> LocalStrategy::eval_models() const {
  const bool several = communicator() && communicator()->size() > 1;
  return {EvalModel{"model", several ? 0 : -1}};
}

std::map<std::string, std::string> LocalStrategy::notes() const {
  if (!communicator() || communicator()->size() < 2) return {};
  return {{"local", fmt::format("{} workers each train a model of their own on their own data; evaluation, "
                                "model.pt and checkpoints are rank 0's model",
                                communicator()->size())}};
}

namespace {

StrategyInfo local_info() {
  StrategyInfo info{"local", "one process, no communication: the baseline every strategy must match",
                    /*exact=*/true, /*needs_communicator=*/false,
                    [](StrategyContext c) -> std::unique_ptr<Strategy> {
                      return std::make_unique<LocalStrategy>(std::move(c));
                    }};
  auto& can = info.capabilities;
  can.fixed_because = "its members train models of their own";
  can.cuda_graph = true;  // no communication in its step
  can.fp16 = true;
  can.lbfgs = true;
  // No mesh: its ranks do not communicate (one rank is the trivial mesh).
  info.mesh.because = "every rank trains a model of its own without communicating";
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(local, local_info());

}  // namespace dtrain::parallel
