// The pipeline step: this rank's batch joins its pipeline's batch, the stage runs its schedule of
// micro-batch forwards and backwards, receiving activations from the stage before and gradients
// from the stage after, then the stage's gradients are all-reduced across pipeline replicas and
// its optimizer steps. See Note [Pipeline schedules] and Note [Pipeline messages].
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>

#include "dtrain/optim/Autocast.h"
#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/pipeline/PipelineMessages.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline {

using namespace wire;

namespace {

// Pass times a rank keeps before the ranks replay them together: 64 steps of 8 micro-batches,
// one all-gather of 8 KB a rank (Note [Replaying the schedule]).
constexpr std::size_t kReplayValues = 1024;

}  // namespace

// The rows of one step: every rank's batch, the pipeline's micro-batches.
struct PipelineStrategy::StepPlan {
  std::vector<std::int64_t> sizes;  // every world rank's batch size
  std::int64_t global_rows = 0;     // the world's batch, what the loss is the mean over
  std::int64_t own_offset = 0;      // this rank's rows within its pipeline's batch
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;  // micro-batches: [begin, end) rows
};

// One step's schedule as it runs on this stage.
struct PipelineStrategy::ScheduleRun {
  ScheduleRun(comm::Communicator* pipe, torch::Device device, std::size_t micro_batches)
      : sends(pipe), ahead(pipe, device), passes(2 * micro_batches, 0.0), outputs(micro_batches) {}
  Sends sends;
  Receives ahead;
  std::vector<PipelineAction> actions;
  std::map<int, InFlight> held;
  Header incoming;  // the step's activation header from the stage before
  bool have_header = false;
  bool sent_header = false;
  torch::Tensor inputs, targets;  // the pipeline's batch: on stage 0 and on the last stage
  double loss_scale = 1.0;
  double idle = 0.0;
  double loss_sum = 0.0;
  // This stage's seconds in each micro-batch's forward, then in each one's backward (Note
  // [Replaying the schedule]).
  std::vector<double> passes;
  std::vector<torch::Tensor> outputs;  // the last stage's, per micro-batch
};

// This stage's layers under train.precision, as MixedPrecision::forward runs the whole network
// (see Note [fp16 numerics]): the same casts at the same layers, so a pipeline computes the
// numbers one process computes. bf16 activations cross stage boundaries as bf16 (half the bytes).
torch::Tensor PipelineStrategy::run_stage(const torch::Tensor& inputs) {
  auto x = inputs;
  if (layout_.stage == 0) x = context_.model->in_memory_order(x);
  const bool last = layout_.stage == layout_.stages - 1;
  // See Note [Transfers kept moving between layers].
  const auto layer_done = [&](torch::Tensor& output) {
    if (!between_layers_) return;
    between_layers_();
    if (output.requires_grad()) {
      output.register_hook([this](const torch::Tensor&) {
        if (between_layers_) between_layers_();
      });
    }
  };
  switch (context_.precision) {
    case optim::Precision::Fp32:
      for (auto& layer : layers_) {
        x = layer.forward(x);
        layer_done(x);
      }
      return x;
    case optim::Precision::Bf16: {
      {
        optim::AutocastGuard autocast(true, torch::kBFloat16, inputs.device().type());
        for (auto& layer : layers_) {
          x = layer.forward(x);
          layer_done(x);
        }
      }
      return last && torch::isFloatingType(x.scalar_type()) ? x.to(torch::kFloat) : x;
    }
    case optim::Precision::Fp16:
      if (x.is_cuda()) {
        // A GPU computes in float16 (autocast); the rounding below is the CPU's emulation.
        {
          optim::AutocastGuard autocast(true, torch::kHalf, at::kCUDA);
          for (auto& layer : layers_) {
            x = layer.forward(x);
            layer_done(x);
          }
        }
        return last && torch::isFloatingType(x.scalar_type()) ? x.to(torch::kFloat) : x;
      }
      for (auto& layer : layers_) {
        x = layer.forward(round_through_half(x));
        layer_done(x);
      }
      return last ? round_through_half(x) : x;
  }
  throw std::logic_error("pipeline: unknown precision");
}

PipelineStrategy::StepPlan PipelineStrategy::plan_step(const data::Batch& batch, StepTiming& timing) {
  const int stages = layout_.stages;
  // Every rank's batch size, so that each knows the pipeline's rows and the global batch.
  auto own_size = torch::tensor({static_cast<std::int64_t>(batch.size())}, torch::kLong);
  auto sizes_tensor = torch::empty({world_->size()}, torch::kLong);
  const auto t0 = util::Clock::now();
  world_->allgather(own_size, sizes_tensor);
  timing.communication += util::seconds_since(t0);
  StepPlan plan;
  plan.sizes.assign(sizes_tensor.data_ptr<std::int64_t>(),
                    sizes_tensor.data_ptr<std::int64_t>() + world_->size());
  for (const auto s : plan.sizes) plan.global_rows += s;
  std::int64_t rows = 0;
  for (int t = 0; t < stages; ++t) {
    if (t == layout_.stage) plan.own_offset = rows;
    rows += plan.sizes[layout_.rank_of(layout_.replica, t)];
  }
  if (rows < options_.micro_batches) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.micro_batches: {} micro-batches but pipeline {}'s batch has {} "
                    "samples (its {} ranks' batches together); lower micro_batches or raise data.batch_size",
                    options_.micro_batches, layout_.replica, rows, stages));
  }
  plan.ranges = micro_batch_ranges(rows, options_.micro_batches);
  return plan;
}

// BatchNorm statistics: every replica of a stage starts the step from the first pipeline's, as
// data_parallel's broadcast_buffers does.
void PipelineStrategy::broadcast_buffers(StepTiming& timing) {
  if (!group_ || group_->size() < 2 || buffers_.empty()) return;
  const auto t0 = util::Clock::now();
  std::vector<torch::Tensor> buffers;
  for (const auto& [name, b] : buffers_) buffers.push_back(b);
  broadcast_coalesced(*group_, buffers, 0);
  timing.communication += util::seconds_since(t0);
}

void PipelineStrategy::gather_batch(const data::Batch& batch, const std::vector<std::int64_t>& sizes,
                                    torch::Tensor& inputs, torch::Tensor& targets, StepTiming& timing) {
  const int stages = layout_.stages;
  const int stage = layout_.stage;
  const int last = stages - 1;
  Sends sends(pipe_.get());
  if (stage != 0) sends.post(batch.inputs, 0, kTagInputs);
  if (stage != last) sends.post(batch.targets, last, kTagTargets);
  auto collect = [&](const torch::Tensor& own, int tag) {
    std::vector<torch::Tensor> parts;
    for (int t = 0; t < stages; ++t) {
      if (t == stage) {
        parts.push_back(own);
        continue;
      }
      parts.push_back(receive(*pipe_, with_rows(shape_of(own), sizes[layout_.rank_of(layout_.replica, t)]),
                              own.scalar_type(), t, tag, &timing.communication, own.device()));
    }
    return parts.size() == 1 ? parts.front() : torch::cat(parts);
  };
  if (stage == 0) inputs = collect(batch.inputs, kTagInputs);
  if (stage == last) targets = collect(batch.targets, kTagTargets);
  timing.communication += sends.wait_all();
}

// Posts the receive of the next forward's activation and of the next backward's gradient after
// action i, where they are known (Note [Receives posted ahead]).
void PipelineStrategy::post_ahead(ScheduleRun& run, const StepPlan& plan, std::size_t i) {
  const int stage = layout_.stage;
  bool forward_seen = false, backward_seen = false;
  for (std::size_t j = i + 1; j < run.actions.size() && !(forward_seen && backward_seen); ++j) {
    const int n = run.actions[j].micro_batch;
    if (run.actions[j].pass == PipelineAction::Pass::Forward) {
      if (forward_seen) continue;
      forward_seen = true;
      if (stage == 0 || !run.have_header) continue;
      run.ahead.post(with_rows(run.incoming.shape, plan.ranges[n].second - plan.ranges[n].first),
                     run.incoming.dtype, stage - 1, kTagActivation + n);
    } else {
      if (backward_seen) continue;
      backward_seen = true;
      const auto it = run.held.find(n);
      if (stage == layout_.stages - 1 || it == run.held.end() ||
          !torch::isFloatingType(it->second.output.scalar_type())) {
        continue;
      }
      run.ahead.post(shape_of(it->second.output), it->second.output.scalar_type(), stage + 1,
                     kTagGradient + n);
    }
  }
}

// The last stage's loss of micro-batch m, weighted by its share of the global batch: the
// gradients summed over micro-batches and replicas are those of the global batch's mean loss.
torch::Tensor PipelineStrategy::micro_batch_loss(ScheduleRun& run, const StepPlan& plan, int m,
                                                 const torch::Tensor& y) {
  const auto [begin, end] = plan.ranges[m];
  auto l = context_.loss(y, run.targets.slice(0, begin, end));
  if (l.numel() != 1) {
    throw std::invalid_argument(
        fmt::format("the loss function returned a tensor of shape {}; it must reduce to one value (mean over "
                    "the batch)",
                    c10::str(l.sizes())));
  }
  l = l.reshape({}) * (static_cast<double>(end - begin) / static_cast<double>(plan.global_rows));
  run.loss_sum += l.detach().item<double>();
  run.outputs[m] = y.detach();
  return run.loss_scale != 1.0 ? l * run.loss_scale : l;
}

void PipelineStrategy::forward_action(ScheduleRun& run, const StepPlan& plan, std::size_t i,
                                      StepResult& result) {
  const int stage = layout_.stage;
  const int m = run.actions[i].micro_batch;
  const auto [begin, end] = plan.ranges[m];
  InFlight flight;
  torch::Tensor x;
  if (stage == 0) {
    x = run.inputs.slice(0, begin, end);
  } else {
    double waited = 0.0;
    if (!run.have_header) {
      run.incoming = receive_header(*pipe_, stage - 1, kTagHeader, &waited);
      run.have_header = true;
    }
    x = run.ahead.take(with_rows(run.incoming.shape, end - begin), run.incoming.dtype, stage - 1,
                       kTagActivation + m, &waited);
    post_ahead(run, plan, i);
    run.idle += waited;
    result.timing.communication += waited;
    if (torch::isFloatingType(x.scalar_type())) x.requires_grad_(true);
    flight.input = x;
  }
  const auto t0 = util::Clock::now();
  auto y = run_stage(x);
  if (stage == layout_.stages - 1) {
    flight.output = micro_batch_loss(run, plan, m, y);
    run.passes[m] = util::seconds_since(t0);
  } else {
    if (y.dim() == 0 || y.size(0) != end - begin) {
      throw std::invalid_argument(fmt::format(
          "pipeline: stage {}'s output has shape {}, not {} rows first; every layer must keep the "
          "batch as its first dimension",
          stage, c10::str(y.sizes()), end - begin));
    }
    run.passes[m] = util::seconds_since(t0);
    if (!run.sent_header) {
      run.sends.post(make_header(kData, y), stage + 1, kTagHeader);
      run.sent_header = true;
    }
    run.sends.post(y, stage + 1, kTagActivation + m);
    flight.output = y;
  }
  result.timing.forward += run.passes[m];
  run.held.emplace(m, std::move(flight));
  peak_held_ = std::max(peak_held_, static_cast<int>(run.held.size()));
  post_ahead(run, plan, i);
}

void PipelineStrategy::backward_action(ScheduleRun& run, const StepPlan& plan, std::size_t i,
                                       StepResult& result) {
  const int stage = layout_.stage;
  const int m = run.actions[i].micro_batch;
  auto node = run.held.extract(m);
  auto& flight = node.mapped();
  double& seconds = run.passes[plan.ranges.size() + m];
  if (stage == layout_.stages - 1) {
    const auto t0 = util::Clock::now();
    if (flight.output.requires_grad()) flight.output.backward();
    seconds = util::seconds_since(t0);
  } else if (torch::isFloatingType(flight.output.scalar_type())) {
    double waited = 0.0;
    auto g = run.ahead.take(shape_of(flight.output), flight.output.scalar_type(), stage + 1, kTagGradient + m,
                            &waited);
    post_ahead(run, plan, i);
    run.idle += waited;
    result.timing.communication += waited;
    const auto t0 = util::Clock::now();
    // A stage whose output does not depend on anything trainable (a Flatten alone) has nothing
    // to propagate.
    if (flight.output.requires_grad()) torch::autograd::backward({flight.output}, {g});
    seconds = util::seconds_since(t0);
  }
  result.timing.backward += seconds;
  if (flight.input.defined() && flight.input.requires_grad()) {
    auto grad = flight.input.grad();
    run.sends.post(grad.defined() ? grad : torch::zeros_like(flight.input), stage - 1, kTagGradient + m);
  }
}

void PipelineStrategy::run_schedule(ScheduleRun& run, const StepPlan& plan, StepResult& result) {
  // See Note [Transfers kept moving between layers]; cleared when the schedule ends, normally or
  // by an exception, before the run's sends and receives go.
  between_layers_ = [&run] {
    try {
      if (!run.sends.poll()) run.ahead.poll();
    } catch (const std::exception&) {
      // The failed transfer's own wait reports it.
    }
  };
  struct Clear {
    std::function<void()>& f;
    ~Clear() { f = nullptr; }
  } clear{between_layers_};
  run.actions = stage_schedule(schedule_, layout_.stages, layout_.stage, options_.micro_batches);
  for (std::size_t i = 0; i < run.actions.size(); ++i) {
    if (run.actions[i].pass == PipelineAction::Pass::Forward) {
      forward_action(run, plan, i, result);
    } else {
      backward_action(run, plan, i, result);
    }
  }
  result.timing.communication += run.sends.wait_all();
}

// After the schedule: the stage's gradients all-reduced across replicas (with dp_shard,
// reduce-scattered and the shards all-reduced: Note [A stage sharded over dp_shard]), fp16's overflow check,
// the global batch's mean loss on every rank, the optimizer's step.
void PipelineStrategy::finish_step(const std::vector<torch::Tensor>& parameters, double loss_sum,
                                   StepResult& result) {
  auto updated = parameters;
  allreduce_tied_gradients(result.timing);  // Note [Tied embeddings across pipeline stages]
  if (layout_.shards > 1) {
    updated = reduce_scatter_gradients(result.timing);
  } else {
    allreduce_gradients(result.timing);
  }
  bool step = true;
  if (precision_.scaling()) {
    step = precision_.finish_gradients(updated, &result.timing.communication);
    result.skipped = precision_.last_skipped();
    result.loss_scale = precision_.loss_scale_figure();
  }
  // The last stages' sums, on every rank.
  auto loss = torch::tensor({layout_.stage == layout_.stages - 1 ? loss_sum : 0.0}, torch::kDouble);
  const auto t0 = util::Clock::now();
  world_->allreduce(loss);
  result.timing.communication += util::seconds_since(t0);
  result.loss = loss.item<double>();
  if (step) optimizer_->step();
  if (step && layout_.shards > 1) gather_parameters(result.timing);
  result.closure_evaluations = 1;
}

StepResult PipelineStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  const auto traffic_before = traffic_snapshot();
  StepResult result;
  result.samples = batch.size();
  const auto plan = plan_step(batch, result.timing);
  broadcast_buffers(result.timing);
  ScheduleRun run(pipe_.get(), device_, plan.ranges.size());
  gather_batch(batch, plan.sizes, run.inputs, run.targets, result.timing);

  optimizer_->zero_grad();
  if (layout_.shards > 1) gradients_into_flat_buffer();
  std::vector<torch::Tensor> parameters;
  for (const auto& [name, p] : optimized()) parameters.push_back(p);
  run.loss_scale = precision_.loss_scale();
  const auto schedule_start = util::Clock::now();
  {
    const auto half = precision_.half_weights(parameters);
    run_schedule(run, plan, result);
  }
  const double schedule_seconds = util::seconds_since(schedule_start);
  const double busy_seconds = result.timing.forward + result.timing.backward;
  finish_step(parameters, run.loss_sum, result);
  if (layout_.stage == layout_.stages - 1) {
    const auto all = run.outputs.size() == 1 ? run.outputs.front() : torch::cat(run.outputs);
    result.outputs = all.slice(0, plan.own_offset, plan.own_offset + batch.size());
  }
  // The first step allocates and meets the peers for the first time: not the pipeline's steady state.
  const bool steady = steps_++ > 0;
  if (steady) {
    recorded_passes_.insert(recorded_passes_.end(), run.passes.begin(), run.passes.end());
    if (recorded_passes_.size() >= std::max(kReplayValues, run.passes.size())) {
      const auto t0 = util::Clock::now();
      replay_recorded();
      result.timing.communication += util::seconds_since(t0);
    }
  }
  const double seconds = util::seconds_since(start);
  result.timing.set_update_to_rest(seconds);
  count_step_communication(traffic_before, result);
  if (steady) {
    idle_seconds_ += run.idle;
    step_seconds_ += seconds;
    busy_seconds_ += busy_seconds;
    schedule_seconds_ += schedule_seconds;
  }
  return result;
}

}  // namespace dtrain::parallel::pipeline
