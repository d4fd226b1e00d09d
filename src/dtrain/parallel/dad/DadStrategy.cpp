// The dAD / rank-dAD step: forward and backward with the taps recording every Linear layer and the
// other parameters' buckets all-reducing during backward, finish(), then one exchange for all
// Linear layers (DadExchange), then the same update on every rank.
#include "dtrain/parallel/dad/DadStrategy.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/dad/LayerPlan.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {
namespace {

std::int64_t bucket_bytes(double megabytes) {
  return static_cast<std::int64_t>(megabytes * 1024 * 1024);
}

// The largest of every rank's `values` (one small all-gather), so that all ranks plan alike.
std::vector<std::int64_t> largest_over_ranks(comm::Communicator& comm,
                                             const std::vector<std::int64_t>& values) {
  auto local = torch::tensor(values, torch::kLong);
  if (comm.size() > 1 && local.numel() > 0) {
    auto all = torch::empty({comm.size() * local.numel()}, torch::kLong);
    comm.allgather(local, all);
    local = std::get<0>(all.view({comm.size(), local.numel()}).max(0));
  }
  return {local.data_ptr<std::int64_t>(), local.data_ptr<std::int64_t>() + local.numel()};
}

std::string describe_choice(LayerMethod chosen, const LayerShape& shape, int rank, int world,
                            int element_size) {
  auto bytes = [&](LayerMethod m) { return estimated_bytes(m, shape, rank, world, element_size); };
  return fmt::format(
      "{} ({} x {}, {} rows; bytes per step: gradient {:.0f}, dad {:.0f}, rankdad r={} {:.0f})",
      to_string(chosen), shape.out_features, shape.in_features, shape.rows, bytes(LayerMethod::Gradient),
      bytes(LayerMethod::Dad), rank, bytes(LayerMethod::RankDad));
}

}  // namespace

void describe_options(config::OptionVisitor& v, DadOptions& o) {
  v.integer("rank", o.rank, config::at_least(1), "rankdad: components per Linear layer at most");
  v.integer("power_iterations", o.power_iterations, config::at_least(1),
            "rankdad: power iterations per component at most");
  v.number("tolerance", o.tolerance, config::kNonNegative,
           "rankdad: a component stops at this relative change");
  v.boolean(
      "auto", o.automatic,
      "per layer the cheapest of the gradient all-reduce, dAD (and rank-dAD), timed in the first steps");
  v.integer("auto_trial_steps", o.auto_trial_steps, config::at_least(0),
            "auto: steps each candidate plan is timed, at most (0: choose by bytes alone)");
  v.number("bucket_mb", o.bucket_mb, config::kPositive,
           "bucket capacity in MB for every parameter outside the Linear layers");
}

DadStrategy::DadStrategy(StrategyContext context, Mode mode)
    : ReplicaStrategy(std::move(context)),
      mode_(mode),
      options_(parallel_config().options.get<DadOptions>("dad")),
      taps_(model()),
      generator_(at::make_generator<at::CPUGeneratorImpl>(0x5eedULL + communicator()->rank())) {
  if (taps_.layers().empty()) {
    throw std::invalid_argument(fmt::format(
        "parallel.strategy {}: the model has no torch::nn::Linear layer with a trained weight to tap ({} "
        "shares Linear layers' inputs and output gradients instead of their weight gradients, and "
        "would run as data_parallel does); use data_parallel",
        name(), name()));
  }
  const auto before = communicator()->stats();
  verify_same_module(*communicator(), model());
  broadcast_coalesced(*communicator(), module_state(model()), /*root=*/0, bucket_bytes(options_.bucket_mb));
  count_own_communication(communicator(), before);
}

void DadStrategy::plan(int accumulation_steps) {
  auto& layers = taps_.layers();
  std::vector<std::int64_t> rows;
  for (const auto& layer : layers) rows.push_back(layer.rows() * accumulation_steps);
  rows = largest_over_ranks(*communicator(), rows);
  const int world = communicator()->size();
  const int element_size = static_cast<int>(model().parameters().front().element_size());
  const std::vector<LayerMethod> allowed =
      mode_ == Mode::Dad
          ? std::vector<LayerMethod>{LayerMethod::Gradient, LayerMethod::Dad}
          : std::vector<LayerMethod>{LayerMethod::Gradient, LayerMethod::Dad, LayerMethod::RankDad};
  PlanTrial::Plan by_bytes;
  std::size_t i = 0;
  for (const auto& layer : layers) {
    shapes_.push_back({layer.in_features, layer.out_features, rows[i++], layer.module->bias.defined()});
    by_bytes.push_back(options_.automatic
                           ? cheapest(allowed, shapes_.back(), options_.rank, world, element_size)
                           : (mode_ == Mode::Dad ? LayerMethod::Dad : LayerMethod::RankDad));
  }
  std::vector<PlanTrial::Plan> plans{by_bytes};
  std::vector<std::string> names{options_.automatic ? "cheapest in bytes" : name()};
  if (options_.automatic && options_.auto_trial_steps > 0) {
    for (const auto method : allowed) {
      const PlanTrial::Plan uniform(layers.size(), method);
      if (std::find(plans.begin(), plans.end(), uniform) != plans.end()) continue;
      plans.push_back(uniform);
      names.push_back("all " + to_string(method));
    }
  }
  trial_ = std::make_unique<PlanTrial>(std::move(plans), std::move(names), options_.auto_trial_steps);
  methods_ = trial_->current();
  // This step's layers have recorded their forward; from its backward on only what is gathered.
  record_what_is_gathered();
  note_methods();
}

void DadStrategy::note_methods() {
  const int world = communicator()->size();
  const int element_size = static_cast<int>(model().parameters().front().element_size());
  std::size_t i = 0;
  for (const auto& layer : taps_.layers()) {
    notes_["dad/" + layer.name] =
        describe_choice(methods_[i], shapes_[i], options_.rank, world, element_size);
    ++i;
  }
}

void DadStrategy::use(const PlanTrial::Plan& methods) {
  if (methods == methods_) return;
  methods_ = methods;
  record_what_is_gathered();
  dp_.reset();  // its hooks go; the new one's buckets hold the gradients the plan all-reduces
  build_reducer();
}

void DadStrategy::record_what_is_gathered() {
  std::vector<bool> gathered;
  for (const auto method : methods_) gathered.push_back(method != LayerMethod::Gradient);
  taps_.record_only(gathered);
}

void DadStrategy::advance_trial(double step_seconds) {
  if (!trial_ || trial_->settled()) return;
  trial_->record(step_seconds, *communicator());
  use(trial_->current());
  if (!trial_->settled()) return;
  note_methods();
  notes_["dad/auto"] = trial_->summary();
}

void DadStrategy::build_reducer() {
  DataParallelOptions reducer;
  reducer.bucket_mb = options_.bucket_mb;
  reducer.broadcast_initial_state = false;  // done at construction
  reducer.check_same_module = false;
  std::size_t i = 0;
  for (const auto& layer : taps_.layers()) {
    const auto method = methods_[i++];
    if (method == LayerMethod::Gradient) continue;
    reducer.exclude.insert(layer.name.empty() ? "weight" : layer.name + ".weight");
    // dAD rebuilds the bias gradient from the gathered Δ; rank-dAD's travels in the buckets.
    if (method == LayerMethod::Dad)
      reducer.exclude.insert(layer.name.empty() ? "bias" : layer.name + ".bias");
  }
  dp_ = std::make_unique<DataParallel>(model_ptr(), communicator(), reducer);
}

std::vector<ExchangeLayer> DadStrategy::exchange_layers() {
  std::vector<ExchangeLayer> out;
  std::size_t i = 0;
  for (auto& layer : taps_.layers()) {
    const auto method = methods_[i++];
    if (method != LayerMethod::Gradient) out.push_back({&layer, method});
  }
  return out;
}

StepResult DadStrategy::train_step(const data::Batch& batch) {
  const bool planned = dp_ != nullptr;  // the planning step is the trial's warm-up
  const auto start = util::Clock::now();
  const auto before = communicator()->stats();
  StepResult result;
  result.samples = batch.size();
  const int accumulation = parallel_config().accumulation_steps;
  const PowerIterationOptions power{options_.rank, options_.power_iterations, options_.tolerance};
  // BatchNorm statistics as data_parallel keeps them: rank 0's, before every step.
  if (const auto buffers = model().buffers(/*recurse=*/true); !buffers.empty()) {
    const auto t0 = util::Clock::now();
    broadcast_coalesced(*communicator(), buffers, 0, bucket_bytes(options_.bucket_mb));
    result.timing.communication += util::seconds_since(t0);
  }
  const ForwardFn forward = forward_fn();
  // Each micro-batch's loss is where the taps find the plain torch::nn::Linear layers' calls.
  const LossFn tapped_loss = [&](const torch::Tensor& outputs, const torch::Tensor& targets) {
    auto l = loss()(outputs, targets);
    taps_.attach(l);
    return l;
  };
  // An optimizer that evaluates the closure several times (L-BFGS) adds up each evaluation's phases.
  // In fp16 the rebuilt gradients are checked, agreed and unscaled after the exchange (step_with).
  step_with(
      [&]() -> torch::Tensor {
        optimizer().zero_grad();
        taps_.clear();
        auto step = forward_backward(
            forward, tapped_loss, batch.inputs, batch.targets, accumulation,
            [&](int, bool last, const torch::Tensor& loss_so_far) {
              if (!dp_) {
                plan(accumulation);
                build_reducer();
              }
              dp_->set_sync(last);
              if (last) dp_->carry_values(loss_so_far);
            },
            precision().loss_scale_tensor());
        result.timing.forward += step.forward_seconds;
        result.timing.backward += step.backward_seconds;
        dp_->finish();
        last_exchange_ = exchange_and_rebuild(communicator().get(), exchange_layers(), power, generator_);
        // Rebuilding the gradients from what was received belongs to the update.
        result.timing.communication +=
            dp_->last_sync_timing().finish_wait_seconds + last_exchange_.communication;
        auto global_loss = dp_->carried_values().reshape({});
        result.outputs = step.outputs;
        result.loss = util::DeviceScalar::of(global_loss);
        return global_loss;
      },
      result);
  result.timing.set_update_to_rest(util::seconds_since(start));
  result.bytes_sent = count_own_communication(communicator(), before).total().wire_bytes;
  if (planned) advance_trial(util::seconds_since(start));
  return result;
}

std::map<std::string, double> DadStrategy::metrics() {
  auto out = ReplicaStrategy::metrics();
  for (const char* key : {"dad/layers_gradient", "dad/layers_dad", "dad/layers_rankdad"}) out[key] = 0;
  for (const auto method : methods_) out["dad/layers_" + to_string(method)] += 1;
  if (mode_ == Mode::RankDad) out["dad/mean_rank"] = last_exchange_.mean_rank;
  return out;
}

namespace {

StrategyInfo dad_info() {
  StrategyInfo info{
      "dad",
      "distributed auto-differentiation: Linear layers share their inputs and output gradients, "
      "the rest all-reduce in buckets (exact)",
      /*exact=*/true, /*needs_communicator=*/true, [](StrategyContext c) -> std::unique_ptr<Strategy> {
        return std::make_unique<DadStrategy>(std::move(c), DadStrategy::Mode::Dad);
      }};
  auto& can = info.capabilities;
  can.fixed_because = "its members train models of their own";
  can.fp16 = true;
  can.lbfgs = true;
  info.mesh.because =
      "every rank keeps the whole model and exchanges layer inputs and gradients with all the others";
  info.mesh.implied = [](const config::ParallelConfig&, int world) {
    return std::optional<MeshShape>(MeshShape{1, world, 1});
  };
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(dad, dad_info(), DadOptions{}, describe_options);

}  // namespace dtrain::parallel
