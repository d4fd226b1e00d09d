// The zero strategy's step, evaluation, checkpoints and accounting; see ZeroStrategy.h.
#include "dtrain/parallel/zero/ZeroStrategy.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/lbfgs.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>

#include "dtrain/optim/Autocast.h"
#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/GradientReadyHook.h"
#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

// Note [ZeRO in dtrain]
// What we take from ZeRO (Rajbhandari et al. 2020, §5) and FairScale's FSDP, and where we differ:
// - Units. DeepSpeed's stage 1 and 2 (runtime/zero/stage_1_and_2.py) flatten a whole parameter
//   group into one buffer and cut it into N equal partitions, so a parameter can straddle two
//   ranks and a gradient bucket's reduction has to be routed to the owners piece by piece. We cut
//   FSDP's way in every stage: each stage of models::Network with parameters is a unit with a flat
//   buffer of its own, padded to a multiple of N (Note [Padding is explicit]) and split evenly, so
//   one unit's gradients are one reduce-scatter whose output is exactly this rank's shard, and the
//   stages a Network already has are the granularity stage 3 gathers at (FSDP wraps modules).
// - The optimizer is LibTorch's, built by the context's factory over the shards (one flat 1-D
//   tensor per unit), so sgd, adam and adamw keep their exact update; their state is element-wise,
//   which is what makes sharding it exact. lbfgs (one history over all parameters) is refused.
// - Stage 1 keeps whole gradients and reduce-scatters them once backward is done; the updated
//   shards are all-gathered after the step. ZeRO's stage 1 is the same.
// - Stage 2 reduce-scatters a unit as soon as autograd has accumulated all of its gradients
//   (AccumulateGrad post-hooks, as data_parallel's buckets), in reverse unit order on every rank
//   (Note [Bucket launch order] in DataParallel.cpp). Autograd adds each gradient straight into a
//   flat buffer of the unit's (Note [Gradient buffers]), which is the reduce-scatter's input and is
//   given back once the reduction is done: only the shard's gradient persists. The step's first
//   backward reduces straight into the shard's gradient; with accumulation_steps each later
//   micro-batch is reduced into a buffer and added to it (DeepSpeed does the same in stage 2),
//   where stage 1 and data_parallel reduce once.
// - Stage 3 runs the network's stages itself: before a stage's forward its unit is all-gathered
//   (the next one prefetched), after it the unit's storage is freed (Note [Freeing storage]); a
//   hook on the stage's output gradient gathers it again before its backward (and prefetches the
//   stage before), and the post-accumulation hook frees it again when the reduce-scatter starts.
//   The last unit stays gathered from its forward to its backward, as FSDP's root does.
// - Everything is float32 master weights; train.precision rounds or autocasts the computation as
//   in every strategy (MixedPrecision.h). There is no fp16 parameter copy, so ZeRO's K = 12 bytes of
//   optimizer state per parameter are Adam's 8 here.
//
// Note [ZeRO's accounting]
// memory_footprint() counts the storages this rank holds after a step, padding included: with P
// the padded parameter count (sum over units) and Adam,
//   stage 1: parameters 4P, gradients 4P, optimizer 8P/N   (ZeRO's 4Ψ + 4Ψ + 8Ψ/N)
//   stage 2: parameters 4P, gradients 4P/N, optimizer 8P/N (4Ψ + 12Ψ/N)
//   stage 3: parameters 4P/N, gradients 4P/N, optimizer 8P/N (16Ψ/N)
// sgd with momentum holds 4P/N of optimizer state, without momentum none. The buffers a step
// reuses (Note [Reused buffers] in ShardedUnits.h: the flat gradients of kGradientBuffers units,
// Note [Gradient buffers]; two shard-sized outputs or copies; stage 3's gathered units, the
// current one and the prefetched one) are kept between steps but are not the model's state:
// buffer_bytes() reports them apart.
//
// Note [Gradient buffers]
// In stages 2 and 3 a unit's whole gradient exists only while autograd fills it and its
// reduce-scatter runs. When the first gradient of a unit arrives in a backward (a pre-hook on the
// parameter's AccumulateGrad node), the unit gets a zeroed flat buffer of its padded size and its
// parameters' grad() become views of it, so AccumulateGrad adds each gradient into place
// (`grad += new`, as it does for DDP's bucket views) instead of keeping a tensor of its own that
// would then be copied into a flat buffer. The buffer, one of a pool's kept slots (Note [Reused
// buffers]), is the reduce-scatter's input and goes back to the pool when the reduction is retired. At most
// kGradientBuffers (2) units hold a buffer at once: before a third is given one, the oldest reduction in
// flight is waited for, so one unit reduces while the next one fills, the double buffering FSDP and
// DeepSpeed's stage 2 (its IPG buckets) use. Beyond these two units a rank holds only autograd's own gradient
// of the parameter being accumulated.

namespace {

std::string unit_key(std::size_t u) {
  return fmt::format("zero_unit_{}", u);
}

constexpr const char* kOptimizerPrefix = "optimizer/";

// A pre-hook on a parameter's AccumulateGrad node: runs before autograd adds the gradient in.
struct GradientArrivingHook final : torch::autograd::FunctionPreHook {
  explicit GradientArrivingHook(std::function<void()> on_arrival) : on_arrival(std::move(on_arrival)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    on_arrival();
    return grads;
  }
  std::function<void()> on_arrival;
};

const std::vector<std::string> kStateFields{"momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

}  // namespace

void describe_options(config::OptionVisitor& v, ZeroOptions& o) {
  v.integer("stage", o.stage, config::IntRange{1, 3});
  v.boolean("prefetch", o.prefetch);
}

void check(const ZeroOptions& o) {
  if (o.stage != 3 && o.prefetch != ZeroOptions{}.prefetch) {
    throw std::invalid_argument(fmt::format(
        "parallel.zero.prefetch: applies to stage 3 (the only stage that gathers parameters), not stage {}; "
        "set parallel.zero.stage: 3 or leave prefetch out",
        o.stage));
  }
}

ZeroStrategy::ZeroStrategy(StrategyContext context)
    : context_(std::move(context)),
      options_(context_.parallel.options.get<ZeroOptions>("zero")),
      precision_(context_.precision, context_.comm) {
  check(options_);
  auto& comm = *context_.comm;
  rank_ = comm.rank();
  world_ = comm.size();
  const auto before = comm.stats();
  auto& model = *context_.model;
  verify_same_module(comm, model);
  broadcast_coalesced(comm, module_state(model), /*root=*/0);

  torch::NoGradGuard no_grad;
  const auto layouts = zero::plan_units(model, world_);
  unit_of_stage_.assign(model.stages().size(), -1);
  std::vector<torch::Tensor> shards;
  for (const auto& layout : layouts) {
    Unit unit;
    unit.layout = layout;
    const auto options = layout.params.front().param.options().requires_grad(false);
    unit.full = torch::zeros({layout.padded}, options);
    for (const auto& p : layout.params) {
      unit.full.narrow(0, p.offset, p.numel).copy_(p.param.detach().reshape({-1}));
      // The parameter keeps its identity (the module, hooks and checkpoints refer to it) and now
      // reads its values from the unit's flat buffer.
      auto param = p.param;
      param.set_data(zero::alias(unit.full, p.offset, p.param.sizes()));
      param.mutable_grad() = torch::Tensor();
    }
    const std::int64_t begin = static_cast<std::int64_t>(rank_) * layout.shard;
    if (sharded_parameters()) {
      unit.shard = unit.full.narrow(0, begin, layout.shard).clone();
      zero::free_storage(unit.full);
    } else {
      unit.shard = zero::alias(unit.full, begin, {layout.shard});
    }
    unit.shard.set_requires_grad(true);
    if (options_.stage == 1) {
      unit.full_grad = torch::zeros({layout.padded}, options);
      for (const auto& p : layout.params) {
        auto param = p.param;
        param.mutable_grad() = zero::alias(unit.full_grad, p.offset, p.param.sizes());
      }
      unit.shard.mutable_grad() = zero::alias(unit.full_grad, begin, {layout.shard});
    } else {
      unit.shard.mutable_grad() = torch::zeros({layout.shard}, options);
    }
    unit_of_stage_[layout.stage] = static_cast<int>(units_.size());
    shards.push_back(unit.shard);
    units_.push_back(std::move(unit));
  }
  std::size_t unit_bytes = 0, shard_bytes = 0;
  for (const auto& unit : units_) {
    unit_bytes =
        std::max(unit_bytes, static_cast<std::size_t>(unit.layout.padded) * unit.shard.element_size());
    shard_bytes =
        std::max(shard_bytes, static_cast<std::size_t>(unit.layout.shard) * unit.shard.element_size());
  }
  gradient_pool_ = zero::BufferPool(options_.stage >= 2 ? kGradientBuffers : 0, unit_bytes);
  shard_pool_ = zero::BufferPool(2, shard_bytes);
  unit_pool_ = zero::BufferPool(sharded_parameters() ? 2 : 0, unit_bytes);
  optimizer_ = context_.make_optimizer(shards);
  if (dynamic_cast<torch::optim::LBFGS*>(optimizer_.get()) != nullptr) {
    throw std::invalid_argument(
        "optim.name: lbfgs keeps one history over all parameters, which parallel.strategy zero cannot shard; "
        "use optim.name sgd, adam or adamw, or parallel.strategy: data_parallel");
  }
  check_precision_optimizer(context_.precision, *optimizer_);
  if (options_.stage >= 2) install_hooks();
  own_comm_ += comm::difference(comm.stats(), before);
}

ZeroStrategy::~ZeroStrategy() {
  remove_hooks();
  wait_outstanding_quietly();
  // Stage 3's gathered units point into the pool, which goes with the strategy.
  if (sharded_parameters()) {
    for (std::size_t u = 0; u < units_.size(); ++u) free_full(u);
  }
}

std::uint64_t ZeroStrategy::buffer_bytes() const {
  return gradient_pool_.kept_bytes() + shard_pool_.kept_bytes() + unit_pool_.kept_bytes();
}

std::vector<zero::UnitLayout> ZeroStrategy::layouts() const {
  std::vector<zero::UnitLayout> out;
  for (const auto& unit : units_) out.push_back(unit.layout);
  return out;
}

void ZeroStrategy::install_hooks() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    auto& unit = units_[u];
    for (const auto& p : unit.layout.params) {
      // The variable holds its accumulator weakly: holding it here keeps the hook alive.
      auto accumulator = torch::autograd::impl::grad_accumulator(p.param);
      TORCH_INTERNAL_ASSERT(accumulator, "parameter '", p.name, "' has no gradient accumulator");
      unit.hook_keys.push_back(accumulator->add_post_hook(
          std::make_unique<GradientReadyHook>([this, u] { on_gradient_ready(u); })));
      auto pre_hook = std::make_unique<GradientArrivingHook>([this, u] { before_gradient(u); });
      unit.pre_hooks.push_back(pre_hook.get());
      accumulator->add_pre_hook(std::move(pre_hook));
      unit.accumulators.push_back(std::move(accumulator));
    }
    unit.pending = static_cast<int>(unit.layout.params.size());
  }
}

void ZeroStrategy::remove_hooks() {
  for (auto& unit : units_) {
    for (std::size_t i = 0; i < unit.accumulators.size(); ++i) {
      unit.accumulators[i]->del_post_hook(unit.hook_keys[i]);
      // Node has no del_pre_hook in LibTorch 1.13: erase ours by identity.
      auto& pre_hooks = unit.accumulators[i]->pre_hooks();
      for (auto it = pre_hooks.begin(); it != pre_hooks.end(); ++it) {
        if (it->get() == unit.pre_hooks[i]) {
          pre_hooks.erase(it);
          break;
        }
      }
    }
    unit.accumulators.clear();
    unit.hook_keys.clear();
    unit.pre_hooks.clear();
  }
}

void ZeroStrategy::wait_outstanding_quietly() {
  for (auto& unit : units_) {
    for (auto* work : {&unit.gather, &unit.reduce}) {
      if (!*work) continue;
      try {
        (*work)->wait();
      } catch (const std::exception&) {
        // Already failed; the buffers only need to outlive the backend's use of them.
      }
      work->reset();
    }
  }
  in_flight_.clear();
}

// ---- stage 3: gathering and freeing parameters ----

void ZeroStrategy::allocate_full(std::size_t u) {
  auto& unit = units_[u];
  unit.full_slot = unit_pool_.take(unit.layout.padded, unit.full.options());
  zero::lend_storage(unit.full, unit.full_slot,
                     static_cast<std::size_t>(unit.layout.padded) * unit.full.element_size());
}

void ZeroStrategy::free_full(std::size_t u) {
  auto& unit = units_[u];
  if (zero::storage_allocated(unit.full)) zero::free_storage(unit.full);
  unit_pool_.give(unit.full_slot);
  unit.full_slot = torch::Tensor();
}

void ZeroStrategy::launch_gather(std::size_t u) {
  auto& unit = units_[u];
  if (unit.gather || zero::storage_allocated(unit.full)) return;
  allocate_full(u);
  // The shard is storage of its own and nothing writes it while the gather runs.
  unit.gather = context_.comm->allgather(unit.shard.detach(), unit.full, /*async_op=*/true);
}

void ZeroStrategy::wait_gather(std::size_t u, double* communication_seconds) {
  auto& unit = units_[u];
  if (!unit.gather && zero::storage_allocated(unit.full)) return;
  launch_gather(u);
  const auto start = util::Clock::now();
  unit.gather->wait();
  unit.gather.reset();
  if (communication_seconds) *communication_seconds += util::seconds_since(start);
  // fp16 trains with the weights rounded to 16 bits; the shard stays the float32 master, and
  // evaluation and checkpoints see the master values.
  if (precision_.scaling() && in_step_) {
    torch::NoGradGuard no_grad;
    unit.full.copy_(round_through_half(unit.full));
  }
}

void ZeroStrategy::release(std::size_t u) {
  if (!sharded_parameters() || evaluating_) return;
  auto& unit = units_[u];
  if (unit.gather) {
    unit.gather->wait();
    unit.gather.reset();
  }
  free_full(u);
}

void ZeroStrategy::gather_all(double* communication_seconds) {
  if (!sharded_parameters()) return;
  for (std::size_t u = 0; u < units_.size(); ++u) launch_gather(u);
  for (std::size_t u = 0; u < units_.size(); ++u) wait_gather(u, communication_seconds);
}

void ZeroStrategy::release_all() {
  for (std::size_t u = 0; u < units_.size(); ++u) release(u);
}

torch::Tensor ZeroStrategy::forward_sharded(const torch::Tensor& inputs) {
  auto& model = *context_.model;
  const bool fp16 = precision_.scaling();
  const bool training = torch::GradMode::is_enabled();
  auto run = [&]() -> torch::Tensor {
    auto x = inputs;
    if (model.channels_last_on_cpu() && x.dim() == 4 && x.device().is_cpu()) {
      x = x.contiguous(at::MemoryFormat::ChannelsLast);
    }
    auto stages = model.stages();
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const int u = unit_of_stage_[s];
      if (u >= 0) {
        wait_gather(static_cast<std::size_t>(u));
        if (options_.prefetch && static_cast<std::size_t>(u) + 1 < units_.size()) launch_gather(u + 1);
      }
      x = stages[s].forward(fp16 ? round_through_half(x) : x);
      if (u < 0) continue;
      if (training && x.requires_grad()) {
        const auto unit = static_cast<std::size_t>(u);
        x.register_hook([this, unit](const torch::Tensor&) { pre_backward(unit); });
      }
      // The last unit's backward comes right after its forward: it stays.
      if (!(training && static_cast<std::size_t>(u) + 1 == units_.size()))
        release(static_cast<std::size_t>(u));
    }
    return fp16 ? round_through_half(x) : x;
  };
  if (precision_.precision() != optim::Precision::Bf16) return run();
  torch::Tensor outputs;
  {
    optim::AutocastGuard autocast(true, torch::kBFloat16, inputs.device().type());
    outputs = run();
  }
  return torch::isFloatingType(outputs.scalar_type()) ? outputs.to(torch::kFloat) : outputs;
}

void ZeroStrategy::pre_backward(std::size_t u) {
  if (!sharded_parameters()) return;
  wait_gather(u);
  if (options_.prefetch && u > 0) launch_gather(u - 1);
}

// ---- stages 2 and 3: gradients reduce-scattered during backward ----

void ZeroStrategy::on_gradient_ready(std::size_t u) {
  auto& unit = units_[u];
  TORCH_INTERNAL_ASSERT(unit.pending > 0, "zero: a unit's gradients completed twice in one backward");
  if (--unit.pending == 0) launch_ready_reductions();
}

void ZeroStrategy::launch_ready_reductions() {
  // Backward completes units last to first; each rank launches them in that order only.
  while (next_reduction_ < units_.size()) {
    const std::size_t u = units_.size() - 1 - next_reduction_;
    if (units_[u].pending > 0) return;
    launch_reduction(u);
    ++next_reduction_;
  }
}

void ZeroStrategy::before_gradient(std::size_t u) {
  auto& unit = units_[u];
  if (unit.full_grad.defined()) return;  // already filling (or reducing: nothing more arrives)
  // See Note [Gradient buffers]: room for this unit's buffer first.
  while (!in_flight_.empty() && in_flight_.size() + filling_ + 1 > kGradientBuffers) retire_reduction();
  torch::NoGradGuard no_grad;
  // Zeros: AccumulateGrad adds into it, and the padding is sent as zeros.
  unit.full_grad = gradient_pool_.take(unit.layout.padded, unit.shard.options());
  unit.full_grad.zero_();
  for (const auto& p : unit.layout.params) {
    auto param = p.param;
    param.mutable_grad() = zero::alias(unit.full_grad, p.offset, p.param.sizes());
  }
  ++filling_;
}

void ZeroStrategy::launch_reduction(std::size_t u) {
  auto& unit = units_[u];
  before_gradient(u);  // a unit no gradient reached on this rank (unused in this forward): zeros
  torch::NoGradGuard no_grad;
  auto flat = unit.full_grad;
  for (const auto& p : unit.layout.params) {
    auto param = p.param;
    auto& grad = param.mutable_grad();
    // AccumulateGrad adds into the view in place; should it ever have replaced the tensor instead
    // (a layout it cannot add into), the values are copied into place.
    const auto* slot = static_cast<const char*>(flat.data_ptr()) + p.offset * flat.element_size();
    if (grad.defined() && grad.data_ptr() != slot) {
      flat.narrow(0, p.offset, p.numel).copy_(grad.reshape({-1}));
    }
    grad = torch::Tensor();
  }
  --filling_;
  release(u);
  // Dividing before the sum, as data_parallel's buckets do.
  if (world_ > 1) flat.div_(world_);
  // The step's first backward writes the shard's gradient (zero until now) itself; a later
  // micro-batch's is added to it.
  torch::Tensor output = unit.shard.mutable_grad();
  if (!first_backward_) {
    unit.received = shard_pool_.take(unit.layout.shard, flat.options());
    output = unit.received;
  }
  unit.reduce = context_.comm->reduce_scatter(flat, output, comm::ReduceOp::Sum, /*async_op=*/true);
  unit.launched = true;
  in_flight_.push_back(u);
}

void ZeroStrategy::retire_reduction() {
  torch::NoGradGuard no_grad;
  auto& unit = units_[in_flight_.front()];
  in_flight_.pop_front();
  unit.reduce->wait();
  unit.reduce.reset();
  if (unit.received.defined()) {
    unit.shard.mutable_grad().add_(unit.received);
    shard_pool_.give(unit.received);
    unit.received = torch::Tensor();
  }
  gradient_pool_.give(unit.full_grad);
  unit.full_grad = torch::Tensor();
}

double ZeroStrategy::finish_backward(bool last) {
  overlapped_ = 0;
  for (const auto& unit : units_) overlapped_ += unit.launched ? 1 : 0;
  // Units that got no gradient on this rank (unused in this forward) still take part, as zeros.
  for (auto& unit : units_) unit.pending = 0;
  launch_ready_reductions();
  const auto start = util::Clock::now();
  while (!in_flight_.empty()) retire_reduction();
  for (auto& unit : units_) {
    unit.launched = false;
    unit.pending = static_cast<int>(unit.layout.params.size());
  }
  TORCH_INTERNAL_ASSERT(filling_ == 0, "zero: a unit's gradient buffer outlived its backward");
  next_reduction_ = 0;
  first_backward_ = false;
  const double waited = util::seconds_since(start);
  // Between micro-batches the next one's forward has already gathered its last unit for backward.
  if (last) release_all();
  return waited;
}

// ---- stage 1: whole gradients, reduced once per step ----

// The shard's gradient is part of the reduce-scatter's input (the whole gradient), so each unit
// reduces into a pooled buffer and copies it over; at most two units are in flight.
double ZeroStrategy::reduce_scatter_step_gradients() {
  torch::NoGradGuard no_grad;
  std::deque<std::size_t> in_flight;
  double waited = 0;
  auto retire = [&] {
    const auto start = util::Clock::now();
    auto& unit = units_[in_flight.front()];
    in_flight.pop_front();
    unit.reduce->wait();
    unit.reduce.reset();
    waited += util::seconds_since(start);
    unit.shard.mutable_grad().copy_(unit.received);
    shard_pool_.give(unit.received);
    unit.received = torch::Tensor();
  };
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (in_flight.size() >= 2) retire();
    auto& unit = units_[u];
    if (world_ > 1) unit.full_grad.div_(world_);
    unit.received = shard_pool_.take(unit.layout.shard, unit.full_grad.options());
    unit.reduce = context_.comm->reduce_scatter(unit.full_grad, unit.received, comm::ReduceOp::Sum,
                                                /*async_op=*/true);
    in_flight.push_back(u);
  }
  while (!in_flight.empty()) retire();
  return waited;
}

// Stages 1 and 2: every rank's updated shard into every rank's whole parameters. The shard is part
// of the all-gather's output, so each unit sends a copy of it; at most two units are in flight, so
// the copies hold two units' shards, not the whole of this rank's.
double ZeroStrategy::gather_after_step() {
  torch::NoGradGuard no_grad;
  std::deque<std::pair<std::size_t, torch::Tensor>> in_flight;  // unit, the copy it sends
  double waited = 0;
  auto retire = [&] {
    const auto start = util::Clock::now();
    auto& unit = units_[in_flight.front().first];
    unit.gather->wait();
    unit.gather.reset();
    waited += util::seconds_since(start);
    shard_pool_.give(in_flight.front().second);
    in_flight.pop_front();
  };
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (in_flight.size() >= 2) retire();
    auto input = shard_pool_.take(units_[u].layout.shard, units_[u].shard.options());
    input.copy_(units_[u].shard.detach());
    units_[u].gather = context_.comm->allgather(input, units_[u].full, /*async_op=*/true);
    in_flight.emplace_back(u, std::move(input));
  }
  while (!in_flight.empty()) retire();
  return waited;
}

StepResult ZeroStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  auto& comm = *context_.comm;
  const auto traffic_before = comm.stats();
  StepResult result;
  result.samples = batch.size();
  auto& model = *context_.model;

  // BatchNorm's running statistics are not sharded: rank 0's, as data_parallel's broadcast_buffers.
  const auto buffers = model.buffers(/*recurse=*/true);
  if (!buffers.empty()) {
    const auto t0 = util::Clock::now();
    broadcast_coalesced(comm, buffers, /*root=*/0);
    result.timing.communication += util::seconds_since(t0);
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& unit : units_) {
      if (options_.stage == 1) {
        unit.full_grad.zero_();
      } else {
        unit.shard.mutable_grad().zero_();
      }
    }
  }

  const ForwardFn forward = [this](const torch::Tensor& x) {
    return sharded_parameters() ? forward_sharded(x) : precision_.forward(*context_.model, x);
  };
  AccumulatedBatch step;
  in_step_ = true;
  first_backward_ = true;
  {
    // fp16 in stages 1 and 2: the whole parameters hold their 16-bit values during forward and
    // backward (stage 3 rounds what it gathers instead).
    const auto half = sharded_parameters() ? nullptr : precision_.half_weights(model.parameters());
    step = forward_backward(
        forward, context_.loss, batch.inputs, batch.targets, context_.parallel.accumulation_steps,
        [&](int index, bool, const torch::Tensor&) {
          if (index > 0 && options_.stage >= 2) result.timing.communication += finish_backward(false);
        },
        precision_.loss_scale());
    if (options_.stage >= 2) result.timing.communication += finish_backward(true);
  }
  in_step_ = false;
  result.timing.forward = step.forward_seconds;
  result.timing.backward = step.backward_seconds;
  if (options_.stage == 1) result.timing.communication += reduce_scatter_step_gradients();

  // The global batch's mean loss.
  {
    const auto t0 = util::Clock::now();
    auto loss = step.loss.detach().to(torch::kDouble).reshape({1}) / world_;
    comm.allreduce(loss);
    result.loss = loss.item<double>();
    result.timing.communication += util::seconds_since(t0);
  }
  std::vector<torch::Tensor> shards;
  for (const auto& unit : units_) shards.push_back(unit.shard);
  const bool take_step = precision_.finish_gradients(shards, &result.timing.communication);
  if (take_step) {
    optimizer_->step();
    if (!sharded_parameters()) result.timing.communication += gather_after_step();
  }
  result.skipped = precision_.last_skipped();
  result.loss_scale = precision_.loss_scale();
  result.closure_evaluations = 1;
  result.outputs = step.outputs;
  result.timing.set_update_to_rest(util::seconds_since(start));
  auto traffic = comm::difference(comm.stats(), traffic_before);
  own_comm_ += traffic;
  result.bytes_sent = traffic.total().wire_bytes;
  return result;
}

void ZeroStrategy::set_learning_rate(double lr) {
  optim::set_learning_rate(*optimizer_, lr);
}

void ZeroStrategy::begin_evaluation() {
  gather_all();
  evaluating_ = true;  // release() keeps the units until end_evaluation()
  context_.model->eval();
}

torch::Tensor ZeroStrategy::eval_forward(std::size_t, const torch::Tensor& inputs) {
  if (sharded_parameters() && !evaluating_) {
    throw std::logic_error("zero stage 3: eval_forward() outside begin_evaluation()/end_evaluation()");
  }
  torch::NoGradGuard no_grad;
  return context_.model->forward(inputs);
}

void ZeroStrategy::end_evaluation() {
  context_.model->train();
  evaluating_ = false;
  release_all();
}

std::map<std::string, torch::Tensor> ZeroStrategy::model_state() const {
  auto& self = const_cast<ZeroStrategy&>(*this);  // gathers and frees stage 3's units: collective
  self.gather_all();
  std::map<std::string, torch::Tensor> state;
  for (const auto& p : context_.model->named_parameters(/*recurse=*/true))
    state[p.key()] = p.value().detach().clone();
  for (const auto& b : context_.model->named_buffers(/*recurse=*/true))
    state[b.key()] = b.value().detach().clone();
  self.release_all();
  return state;
}

void ZeroStrategy::save(io::Checkpoint& checkpoint) const {
  auto& self = const_cast<ZeroStrategy&>(*this);
  self.gather_all();
  checkpoint.set_module_state("model", *context_.model);
  self.release_all();
  optim::NamedParameters named;
  for (std::size_t u = 0; u < units_.size(); ++u) named.emplace_back(unit_key(u), units_[u].shard);
  const auto state = optim::named_optimizer_state(*optimizer_, named);
  // Every rank has the same keys in the same (sorted) order: the gathers match.
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto& unit = units_[u];
    const std::string prefix = kOptimizerPrefix + unit_key(u) + "/";
    for (auto it = state.lower_bound(prefix); it != state.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      const auto field = it->first.substr(prefix.size());
      if (field == "step") {
        for (const auto& p : unit.layout.params)
          checkpoint.set_tensor(kOptimizerPrefix + p.name + "/step", it->second);
        continue;
      }
      auto whole = torch::empty({unit.layout.padded}, it->second.options());
      context_.comm->allgather(it->second.contiguous(), whole);
      for (const auto& [name, value] : zero::split_whole(unit.layout, whole))
        checkpoint.set_tensor(kOptimizerPrefix + name + "/" + field, value);
    }
  }
  precision_.save(checkpoint);
}

void ZeroStrategy::load(const io::Checkpoint& checkpoint) {
  if (checkpoint.contains("optimizer") || checkpoint.contains("optimizer/lbfgs")) {
    throw std::invalid_argument(
        "checkpoint: its optimizer state is one LibTorch archive (lbfgs, or a checkpoint older than named "
        "optimizer state), which parallel.strategy zero cannot split into shards; resume it with the "
        "strategy and optimizer it was saved with");
  }
  torch::NoGradGuard no_grad;
  // The whole parameters arrive in the units' flat buffers (stage 3: allocated for the moment),
  // and each rank keeps its shard.
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (!zero::storage_allocated(units_[u].full)) allocate_full(u);
  }
  checkpoint.load_module_state("model", *context_.model);
  for (auto& unit : units_) {
    unit.full.narrow(0, unit.layout.numel, unit.layout.padded - unit.layout.numel).zero_();
    if (sharded_parameters())
      unit.shard.detach().copy_(unit.full.narrow(0, rank_ * unit.layout.shard, unit.layout.shard));
  }
  if (sharded_parameters() && !evaluating_) {
    for (std::size_t u = 0; u < units_.size(); ++u) free_full(u);
  }

  std::map<std::string, torch::Tensor> entries;
  optim::NamedParameters named;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto& unit = units_[u];
    named.emplace_back(unit_key(u), unit.shard);
    const std::string key = kOptimizerPrefix + unit_key(u) + "/";
    std::optional<std::int64_t> step;
    for (const auto& p : unit.layout.params) {
      const auto name = kOptimizerPrefix + p.name + "/step";
      if (!checkpoint.contains(name)) continue;
      const auto s = checkpoint.tensor(name).item<std::int64_t>();
      if (step && *step != s) {
        throw std::invalid_argument(fmt::format(
            "checkpoint: the parameters of stage {} took different numbers of optimizer steps ({} and {} for "
            "'{}'); zero keeps one step count per stage, so resume with the strategy it was saved with",
            unit.layout.stage, *step, s, p.name));
      }
      step = s;
    }
    if (step) entries[key + "step"] = torch::tensor(*step);
    for (const auto& field : kStateFields) {
      std::map<std::string, torch::Tensor> whole;
      for (const auto& p : unit.layout.params) {
        const auto name = kOptimizerPrefix + p.name + "/" + field;
        if (checkpoint.contains(name)) whole[p.name] = checkpoint.tensor(name);
      }
      if (whole.empty()) continue;
      const auto flat = zero::join_whole(unit.layout, whole, "optimizer state " + field);
      entries[key + field] = flat.narrow(0, rank_ * unit.layout.shard, unit.layout.shard).clone();
    }
  }
  optim::load_named_optimizer_state(*optimizer_, named, entries);
  precision_.load(checkpoint);
}

std::map<std::string, double> ZeroStrategy::metrics() {
  std::map<std::string, double> out{{"zero/units", static_cast<double>(units_.size())}};
  if (options_.stage >= 2) out["zero/overlapped"] = static_cast<double>(overlapped_);
  return out;
}

std::map<std::string, std::string> ZeroStrategy::notes() const {
  std::int64_t numel = 0, padded = 0, shard = 0;
  for (const auto& unit : units_) {
    numel += unit.layout.numel;
    padded += unit.layout.padded;
    shard += unit.layout.shard;
  }
  return {{"zero/layout",
           fmt::format("stage {}: {} parameters in {} units (one per model stage), padded to {} ({} padding "
                       "elements); {} elements per rank's shard",
                       options_.stage, numel, units_.size(), padded, padded - numel, shard)}};
}

MemoryFootprint ZeroStrategy::memory_footprint() const {
  std::vector<torch::Tensor> parameters, gradients;
  for (const auto& unit : units_) {
    parameters.push_back(unit.full);
    parameters.push_back(unit.shard);
    gradients.push_back(unit.shard.grad());
    gradients.push_back(unit.full_grad);
    gradients.push_back(unit.received);
    for (const auto& p : unit.layout.params) gradients.push_back(p.param.grad());
  }
  MemoryFootprint footprint;
  footprint.parameters = optim::unique_storage_bytes(parameters);
  footprint.gradients = optim::unique_storage_bytes(gradients);
  footprint.optimizer_state = optim::unique_storage_bytes(optim::optimizer_state_tensors(*optimizer_));
  return footprint;
}

namespace {

StrategyInfo zero_info() {
  StrategyInfo info{"zero",
                    "sharded data parallel (ZeRO stage 1/2/3, FSDP): optimizer state, gradients and "
                    "parameters split across ranks",
                    /*exact=*/true,
                    /*needs_communicator=*/true, [](StrategyContext c) -> std::unique_ptr<Strategy> {
                      return std::make_unique<ZeroStrategy>(std::move(c));
                    }};
  info.data_holders = [](const config::ParallelConfig& parallel, int world) {
    check(parallel.options.get<ZeroOptions>("zero"));
    return world;
  };
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(zero, zero_info(), ZeroOptions{}, describe_options);

}  // namespace dtrain::parallel
