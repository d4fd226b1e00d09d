// The data-parallel step: forward and backward on this rank's slice with the bucket all-reduces
// overlapping backward, finish(), then the same update on every rank.
#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"

#include <torch/torch.h>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {
namespace {

const config::ChoiceSet kCompressions{"none", "fp16", "bf16"};

DataParallelOptions reducer_options(const DataParallelStrategyOptions& o) {
  DataParallelOptions options;
  options.bucket_mb = o.bucket_mb;
  options.compression = parse_grad_compression(o.compression);
  return options;
}

}  // namespace

void describe_options(config::OptionVisitor& v, DataParallelStrategyOptions& o) {
  v.number("bucket_mb", o.bucket_mb, config::kPositive);
  v.choice("compression", o.compression, kCompressions);
  v.boolean("broadcast_buffers", o.broadcast_buffers);
}

DataParallelStrategy::DataParallelStrategy(StrategyContext context)
    : ReplicaStrategy(std::move(context)),
      options_(parallel_config().options.get<DataParallelStrategyOptions>("data_parallel")) {
  const auto before = communicator()->stats();
  dp_ = std::make_unique<DataParallel>(model_ptr(), communicator(), reducer_options(options_));
  count_own_communication(before);
}

StepResult DataParallelStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  const auto traffic_before = communicator()->stats();
  StepResult result;
  result.samples = batch.size();

  if (options_.broadcast_buffers && !model().buffers(/*recurse=*/true).empty()) {
    const auto t0 = util::Clock::now();
    dp_->sync_buffers();
    result.timing.communication += util::seconds_since(t0);
  }

  // The closure holds forward, backward and the all-reduces, so an optimizer that evaluates it
  // several times (L-BFGS) sees the same global gradient and loss on every rank, and each
  // evaluation's phases add up. The loss rides along in the last gradient bucket: no collective of
  // its own. The buckets all-reduced during backward count as backward; communication is the wait
  // in finish() (the last bucket's blocking all-reduce and whatever had not yet arrived).
  auto network = model_ptr();
  const ForwardFn forward = [network](const torch::Tensor& x) { return network->forward(x); };
  // See Note [Distributed L-BFGS].
  result.closure_evaluations = step_optimizer([&]() -> torch::Tensor {
    optimizer().zero_grad();
    auto step =
        forward_backward(forward, loss(), batch.inputs, batch.targets, parallel_config().accumulation_steps,
                         [&](int, bool last, const torch::Tensor& loss_so_far) {
                           dp_->set_sync(last);
                           if (last) dp_->carry_values(loss_so_far);
                         });
    result.timing.forward += step.forward_seconds;
    result.timing.backward += step.backward_seconds;
    dp_->finish();
    result.timing.communication += dp_->last_sync_timing().finish_wait_seconds;
    auto global_loss = dp_->carried_values().reshape({});
    result.outputs = step.outputs;
    result.loss = global_loss.item<double>();
    return global_loss;
  });
  result.timing.set_update_to_rest(util::seconds_since(start));
  result.bytes_sent = count_own_communication(traffic_before).total().wire_bytes;
  return result;
}

std::map<std::string, double> DataParallelStrategy::metrics() {
  auto out = ReplicaStrategy::metrics();
  out["data_parallel/buckets"] = static_cast<double>(dp_->bucket_parameter_names().size());
  out["data_parallel/overlapped"] = static_cast<double>(dp_->last_sync_timing().buckets_launched_in_backward);
  return out;
}

DTRAIN_REGISTER_STRATEGY(
    data_parallel,
    StrategyInfo{"data_parallel",
                 "every rank the whole model; gradients all-reduced in buckets during backward (DDP, dSGD)",
                 /*exact=*/true, /*needs_communicator=*/true,
                 [](StrategyContext c) -> std::unique_ptr<Strategy> {
                   return std::make_unique<DataParallelStrategy>(std::move(c));
                 },
                 /*options_section=*/"", /*aliases=*/{"dsgd", "ddp"}},
    DataParallelStrategyOptions{}, describe_options);

}  // namespace dtrain::parallel
