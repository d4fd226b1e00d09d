// The data-parallel step: forward and backward on this rank's slice with the bucket all-reduces
// overlapping backward, finish(), then the same update on every rank.
#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {
namespace {

const std::string kPowerSgdPrefix = "strategy/data_parallel/powersgd/";

// PowerSgdOptions::wire holds the wire as the reducer names compressions.
GradCompression as_grad_compression(PowerSgdWire wire) {
  switch (wire) {
    case PowerSgdWire::None:
      return GradCompression::None;
    case PowerSgdWire::Fp16:
      return GradCompression::Fp16;
    case PowerSgdWire::Bf16:
      return GradCompression::Bf16;
  }
  throw std::logic_error("as_grad_compression: a PowerSgdWire without a GradCompression");
}

DataParallelOptions reducer_options(const DataParallelStrategyOptions& o, std::uint64_t seed) {
  DataParallelOptions options;
  options.bucket_mb = o.bucket_mb;
  options.compression = o.compression;
  options.powersgd.rank = o.powersgd_rank;
  options.powersgd.start_round = o.powersgd_start_step;
  options.powersgd.min_compression = o.powersgd_min_compression;
  options.powersgd.warm_start = o.powersgd_warm_start;
  options.powersgd.error_feedback = o.powersgd_error_feedback;
  options.powersgd.wire = as_grad_compression(o.powersgd_wire);
  options.powersgd.seed = seed;
  return options;
}

}  // namespace

void describe_options(config::OptionVisitor& v, DataParallelStrategyOptions& o) {
  v.number("bucket_mb", o.bucket_mb, config::kPositive, "gradient bucket capacity in MB (PyTorch DDP: 25)");
  v.choice("compression", o.compression, kGradCompressionNames,
           "gradients on the wire: none, fp16 or bf16 (half the bytes), powersgd (rank-r factors)");
  v.boolean("broadcast_buffers", o.broadcast_buffers,
            "broadcast rank 0's buffers (BatchNorm statistics) before every step, as DDP does");
  v.integer("powersgd_rank", o.powersgd_rank, config::at_least(1),
            "powersgd: the rank r of each factorisation");
  v.integer("powersgd_start_step", o.powersgd_start_step, config::at_least(0),
            "powersgd: synchronised rounds all-reduced plainly before compression starts");
  v.number("powersgd_min_compression", o.powersgd_min_compression, config::kNonNegative,
           "powersgd: a matrix compressing less than this goes plainly");
  v.boolean("powersgd_warm_start", o.powersgd_warm_start, "powersgd: start each round from the last Q");
  v.boolean("powersgd_error_feedback", o.powersgd_error_feedback,
            "powersgd: add what compression left out to the next round's gradient");
  v.choice("powersgd_wire", o.powersgd_wire, kPowerSgdWireNames,
           "powersgd: P, Q and the plain gradients on the wire as float32 (none), fp16 or bf16");
}

void check(const DataParallelStrategyOptions& o) {
  if (o.compression == GradCompression::PowerSgd) return;
  const DataParallelStrategyOptions d;
  const char* given = o.powersgd_rank != d.powersgd_rank                         ? "powersgd_rank"
                      : o.powersgd_start_step != d.powersgd_start_step           ? "powersgd_start_step"
                      : o.powersgd_min_compression != d.powersgd_min_compression ? "powersgd_min_compression"
                      : o.powersgd_warm_start != d.powersgd_warm_start           ? "powersgd_warm_start"
                      : o.powersgd_error_feedback != d.powersgd_error_feedback   ? "powersgd_error_feedback"
                      : o.powersgd_wire != d.powersgd_wire                       ? "powersgd_wire"
                                                                                 : nullptr;
  if (given) {
    throw std::invalid_argument(
        fmt::format("parallel.data_parallel.{}: applies to compression powersgd, not {}; set "
                    "parallel.data_parallel.compression: powersgd or leave {} out",
                    given, kGradCompressionNames.name(o.compression), given));
  }
}

DataParallelStrategy::DataParallelStrategy(StrategyContext context)
    : ReplicaStrategy(std::move(context)),
      options_(parallel_config().options.get<DataParallelStrategyOptions>("data_parallel")) {
  check(options_);
  // L-BFGS evaluates its closure several times per step; with error feedback each evaluation
  // would add the residue the previous evaluation left, so its line search compares gradients of
  // different functions (a 3-step trial on an mlp diverged to a loss of 4e5). Refused, not warned.
  if (options_.compression == GradCompression::PowerSgd && options_.powersgd_error_feedback &&
      dynamic_cast<torch::optim::LBFGS*>(&optimizer()) != nullptr) {
    throw std::invalid_argument(
        "parallel.data_parallel.powersgd_error_feedback: true does not work with optim.name lbfgs (each "
        "line-search evaluation would carry the last one's residue); set "
        "parallel.data_parallel.powersgd_error_feedback: false or choose another optimizer");
  }
  const auto before = communicator()->stats();
  dp_ = std::make_unique<DataParallel>(model_ptr(), communicator(), reducer_options(options_, seed()));
  count_own_communication(communicator(), before);
}

StepResult DataParallelStrategy::train_step(const data::Batch& batch) {
  return step(&batch);
}

void DataParallelStrategy::check_joinable() const {
  if (options_.compression == GradCompression::PowerSgd) {
    throw std::invalid_argument(
        "data.equalize: join does not work with parallel.data_parallel.compression: powersgd (a shadow "
        "step's "
        "zero gradient would enter the error feedback); use data.equalize: pad or another compression");
  }
}

StepResult DataParallelStrategy::join_step(const data::Batch* batch, double weight) {
  check_joinable();
  dp_->set_contribution(batch ? weight : 0.0);
  try {
    auto result = step(batch);
    dp_->set_contribution(1.0);
    return result;
  } catch (...) {
    dp_->set_contribution(1.0);
    throw;
  }
}

StepResult DataParallelStrategy::step(const data::Batch* batch) {
  const auto start = util::Clock::now();
  const auto traffic_before = communicator()->stats();
  StepResult result;
  result.samples = batch ? batch->size() : 0;

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
  // In fp16 the averaged gradient of a rank's overflow is inf or NaN on every rank already; the
  // explicit agreement in step_with() makes that a decision rather than a consequence.
  // A rank without a batch (Note [Join]) runs the same closure without forward and backward:
  // finish() launches every bucket with the zeroed gradients, and the carried loss is zero.
  const ForwardFn forward = forward_fn();
  step_with(
      [&]() -> torch::Tensor {
        optimizer().zero_grad();
        if (batch) {
          auto step = forward_backward(
              forward, loss(), batch->inputs, batch->targets, parallel_config().accumulation_steps,
              [&](int, bool last, const torch::Tensor& loss_so_far) {
                dp_->set_sync(last);
                if (last) dp_->carry_values(loss_so_far);
              },
              precision().loss_scale_tensor());
          result.timing.forward += step.forward_seconds;
          result.timing.backward += step.backward_seconds;
          result.outputs = step.outputs;
        } else {
          dp_->set_sync(true);
          dp_->carry_values(torch::zeros({1}));
        }
        dp_->finish();
        result.timing.communication += dp_->last_sync_timing().finish_wait_seconds;
        auto global_loss = dp_->carried_values().reshape({});
        result.loss = util::DeviceScalar::of(global_loss);
        return global_loss;
      },
      result);
  result.timing.set_update_to_rest(util::seconds_since(start));
  result.bytes_sent = count_own_communication(communicator(), traffic_before).total().wire_bytes;
  return result;
}

std::map<std::string, double> DataParallelStrategy::metrics() {
  auto out = ReplicaStrategy::metrics();
  out["data_parallel/buckets"] = static_cast<double>(dp_->bucket_parameter_names().size());
  out["data_parallel/overlapped"] = static_cast<double>(dp_->last_sync_timing().buckets_launched_in_backward);
  return out;
}

std::map<std::string, std::string> DataParallelStrategy::notes() const {
  if (options_.compression != GradCompression::PowerSgd) return {};
  const auto s = dp_->compression_summary();
  return {{"data_parallel/powersgd",
           fmt::format(
               "{} of {} gradient tensors compressed at rank {}; a compressed step sends {} of {} elements "
               "({:.1f}x fewer)",
               s.compressed_tensors, s.compressed_tensors + s.plain_tensors, options_.powersgd_rank,
               s.sent_elements, s.elements,
               s.sent_elements > 0 ? static_cast<double>(s.elements) / s.sent_elements : 0.0)}};
}

void DataParallelStrategy::save(io::Checkpoint& checkpoint) const {
  ReplicaStrategy::save(checkpoint);
  for (const auto& [key, value] : dp_->compression_state())
    checkpoint.set_tensor(kPowerSgdPrefix + key, value);
}

void DataParallelStrategy::load(const io::Checkpoint& checkpoint) {
  ReplicaStrategy::load(checkpoint);
  // A checkpoint of another compression (or strategy) has no such keys; PowerSGD then starts afresh.
  if (options_.compression != GradCompression::PowerSgd) return;
  std::map<std::string, torch::Tensor> state;
  for (const auto& [key, value] : checkpoint.tensors()) {
    if (key.rfind(kPowerSgdPrefix, 0) == 0) state.emplace(key.substr(kPowerSgdPrefix.size()), value);
  }
  dp_->load_compression_state(state);
}

namespace {

StrategyInfo data_parallel_info() {
  StrategyInfo info{
      "data_parallel",
      "every rank the whole model; gradients all-reduced in buckets during backward (DDP, dSGD)",
      /*exact=*/true,
      /*needs_communicator=*/true,
      [](StrategyContext c) -> std::unique_ptr<Strategy> {
        return std::make_unique<DataParallelStrategy>(std::move(c));
      },
      /*options_section=*/"",
      /*aliases=*/{"dsgd", "ddp"}};
  // One data holder per rank; also what `dtrain train --nproc` checks before it starts workers.
  info.data_holders = [](const config::ParallelConfig& parallel, int world) {
    check(parallel.options.get<DataParallelStrategyOptions>("data_parallel"));
    return world;
  };
  auto& can = info.capabilities;
  can.elastic = Elasticity::WholeState;
  can.fp16 = true;
  can.lbfgs = true;  // Note [Distributed L-BFGS]
  can.wire_compression = true;
  info.mesh.dims = {MeshDim::DpReplicate, MeshDim::Tp};
  info.mesh.because = "every rank keeps the whole model and all-reduces its gradients";
  info.mesh.implied = [](const config::ParallelConfig&, int world) {
    return std::optional<MeshShape>(MeshShape{1, world, 1});
  };
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(data_parallel, data_parallel_info(), DataParallelStrategyOptions{},
                         describe_options);

}  // namespace dtrain::parallel
