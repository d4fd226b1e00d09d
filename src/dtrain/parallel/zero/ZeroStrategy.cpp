// The zero strategy's construction, step, evaluation and accounting, and its registration; see
// ZeroStrategy.h. Stage 3's parameter gathering is in ZeroParameters.cpp, the gradients'
// reduce-scatters in ZeroGradients.cpp, checkpoints in ZeroCheckpoint.cpp.
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
//
// Note [HSDP]
// Hybrid sharding, PyTorch FSDP's HYBRID_SHARD and fully_shard over a 2-D mesh: on parallel.mesh
// {dp_replicate: R, dp_shard: S} (Note [The device mesh] in parallel/Mesh.h) each group of S
// consecutive ranks holds one copy of the model state, sharded as above over S (units padded to a
// multiple of S, every all-gather and reduce-scatter inside the shard group's communicator), and the
// R ranks that hold the same shard (one per group) all-reduce its gradient once the step's backward
// is done, before the optimizer steps. Each rank divides its gradient by R x S before the
// reduce-scatter, so the reduce-scatter's sum over the group and the all-reduce's sum over the
// replicas make the mean over every rank, which is the gradient of one process on the global batch;
// the replicas then apply the same update to the same shard and stay equal without a broadcast. The
// all-reduce runs after backward, not overlapped with it: it carries 1/S of the gradient. Without a
// mesh, zero on N ranks is {dp_shard: N}: the shard group is the world and there is no all-reduce.

void describe_options(config::OptionVisitor& v, ZeroOptions& o) {
  v.integer("stage", o.stage, config::IntRange{1, 3},
            "1: optimizer state sharded; 2: and gradients; 3: and parameters (FSDP)");
  v.boolean("prefetch", o.prefetch,
            "stage 3: gather the next stage's parameters while the current one computes");
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
  const auto before = comm.stats();
  split_groups();
  auto& model = *context_.model;
  verify_same_module(comm, model);
  broadcast_coalesced(comm, module_state(model), /*root=*/0);

  torch::NoGradGuard no_grad;
  const auto layouts = zero::plan_units(model, shards_);
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
  borrowed_ = zero::borrowed_units(model, layouts);
  lent_.assign(units_.size(), false);
  for (const auto& units : borrowed_) {
    for (const auto u : units) lent_[u] = true;
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
  add_own_communication(comm::difference(comm.stats(), before));
}

void ZeroStrategy::split_groups() {
  // resolve_mesh has a mesh for zero on any world size (zero_info below). Without replicas the shard
  // group is the world and nothing is split: zero on N ranks as it always ran.
  const auto shape = *resolve_mesh(context_.parallel, context_.comm->size());
  std::vector<MeshDim> groups{MeshDim::DpShard};
  if (shape.dp_replicate > 1) groups.push_back(MeshDim::DpReplicate);
  mesh_ = std::make_unique<DeviceMesh>(shape, context_.comm, groups);
  shard_ = mesh_->comm(MeshDim::DpShard);
  replicate_ = mesh_->comm(MeshDim::DpReplicate);  // null without replicas
  rank_ = shard_->rank();
  shards_ = shard_->size();
  ranks_ = context_.comm->size();
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

std::vector<comm::CommStats> ZeroStrategy::traffic_now() const {
  std::vector<comm::CommStats> out;
  for (const auto& c : mesh_->communicators()) out.push_back(c->stats());
  return out;
}

comm::CommStats ZeroStrategy::traffic_since(const std::vector<comm::CommStats>& before) const {
  const auto communicators = mesh_->communicators();
  comm::CommStats traffic;
  for (std::size_t i = 0; i < communicators.size(); ++i)
    traffic += comm::difference(communicators[i]->stats(), before[i]);
  return traffic;
}

std::vector<zero::UnitLayout> ZeroStrategy::layouts() const {
  std::vector<zero::UnitLayout> out;
  for (const auto& unit : units_) out.push_back(unit.layout);
  return out;
}

StepResult ZeroStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  auto& comm = *context_.comm;
  const auto traffic_before = traffic_now();
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
        precision_.loss_scale_tensor());
    if (options_.stage >= 2) result.timing.communication += finish_backward(true);
  }
  in_step_ = false;
  result.timing.forward = step.forward_seconds;
  result.timing.backward = step.backward_seconds;
  if (options_.stage == 1) result.timing.communication += reduce_scatter_step_gradients();
  result.timing.communication += allreduce_across_replicas();

  // The global batch's mean loss.
  {
    const auto t0 = util::Clock::now();
    auto loss = step.loss.detach().to(torch::kDouble).reshape({1}) / ranks_;
    comm.allreduce(loss);
    result.loss = util::DeviceScalar::of(loss);
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
  result.loss_scale = precision_.loss_scale_figure();
  result.closure_evaluations = 1;
  result.outputs = step.outputs;
  result.timing.set_update_to_rest(util::seconds_since(start));
  const auto traffic = traffic_since(traffic_before);
  add_own_communication(traffic);
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
  // A unit is a model stage with parameters (plan_units): the model's summary line counts all of its
  // stages ("in 12 stages"), activations and pooling included, so the note names both counts.
  auto layout = fmt::format(
      "stage {}: {} parameters in {} units (one per model stage with parameters, of the model's {} stages), "
      "padded to {} ({} padding elements); {} elements per rank's shard",
      options_.stage, numel, units_.size(), unit_of_stage_.size(), padded, padded - numel, shard);
  if (replicate_) {
    layout += fmt::format("; hybrid (HSDP): sharded over {} ranks, replicated {} times ({})", shards_,
                          replicate_->size(), mesh_->shape().describe());
  }
  return {{"zero/layout", layout}};
}

MemoryFootprint ZeroStrategy::planned_footprint() const {
  std::uint64_t whole = 0, shards = 0, largest = 0;
  for (const auto& unit : units_) {
    const std::uint64_t bytes = unit.shard.numel() * unit.shard.element_size();
    shards += bytes;
    whole += bytes * shards_;
    largest = std::max(largest, bytes * shards_);
  }
  MemoryFootprint plan;
  // Stages 1 and 2: the shard is a view of the whole flat parameters.
  plan.parameters = sharded_parameters() ? shards : whole;
  // Stage 1 keeps the whole step's gradient (the shard's is a view of it); stages 2 and 3 the
  // shard's and, while a backward runs, up to kGradientBuffers units' whole gradients.
  plan.step_gradients = options_.stage == 1 ? 0 : std::min<std::uint64_t>(whole, largest * kGradientBuffers);
  plan.gradients = options_.stage == 1 ? whole : shards + plan.step_gradients;
  plan.optimizer_state = optim::planned_optimizer_state_bytes(*optimizer_);
  return plan;
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
  return footprint_of(parameters, gradients, optim::optimizer_state_tensors(*optimizer_));
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
  auto& can = info.capabilities;
  can.elastic = Elasticity::ShardedState;
  can.fp16 = true;
  info.mesh.dims = {MeshDim::DpReplicate, MeshDim::DpShard, MeshDim::Tp};
  info.mesh.because =
      "it shards the model state over dp_shard and all-reduces the shards' gradients over dp_replicate";
  info.mesh.implied = [](const config::ParallelConfig&, int world) {
    return std::optional<MeshShape>(MeshShape{1, 1, world});
  };
  // lbfgs refused: its history is one vector over all parameters, which no rank holds.
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(zero, zero_info(), ZeroOptions{}, describe_options);

}  // namespace dtrain::parallel
