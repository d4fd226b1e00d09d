// The `pipeline` strategy's construction: the options, the cut of the model's layers into
// stages, which tensors this rank's stage keeps, the pipeline and stage-group communicators, and
// the optimizer over the stage's parameters; the registration. The step, evaluation, checkpoints
// and metrics are in PipelineStep.cpp, PipelineEvaluation.cpp, PipelineCheckpoint.cpp and
// PipelineMetrics.cpp; the wire protocol in PipelineMessages.h.
#include "dtrain/parallel/pipeline/PipelineStrategy.h"

#include <fmt/format.h>
#include <torch/optim/lbfgs.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <typeinfo>

#include "dtrain/models/TransformerBlocks.h"
#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/pipeline/PipelineMessages.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline {

void describe_options(config::OptionVisitor& v, PipelineOptions& o) {
  v.choice("schedule", o.schedule, kScheduleNames, "micro-batch schedule: gpipe or 1f1b");
  v.integer("stages", o.stages, config::IntRange{0, 1 << 16},
            "stages per pipeline, dividing the world (0: one pipeline over every rank)");
  v.integer("micro_batches", o.micro_batches, config::IntRange{1, wire::kMaxMicroBatches},
            "micro-batches per step");
  v.choice("balance", o.balance, kBalanceNames,
           "where the cuts go: parameters (equal counts), time (measured), cut_points (given)");
  v.int_list("cut_points", o.cut_points, 1, /*allow_empty=*/true,
             "balance cut_points: the first layer of stages 1..S-1, e.g. [3, 7]");
}

int check_options(const PipelineOptions& o, int world) {
  const int stages = o.stages == 0 ? world : o.stages;
  if (world % stages != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.pipeline.stages: {} stages do not divide the world size {}; the world must be replicas x "
        "stages, so choose stages among the divisors of {} (or 0 for one pipeline over all ranks)",
        stages, world, world));
  }
  if (o.balance != Balance::CutPoints && !o.cut_points.empty()) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.cut_points: applies to balance: cut_points, not balance: {}; set "
                    "parallel.pipeline.balance: cut_points or leave cut_points out",
                    kBalanceNames.name(o.balance)));
  }
  if (o.balance == Balance::CutPoints && static_cast<int>(o.cut_points.size()) != stages - 1) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.cut_points: {} stages need {} cut points (the first layer of stages "
                    "1..{}), found {}",
                    stages, stages - 1, stages - 1, o.cut_points.size()));
  }
  return stages;
}

PipelineStrategy::PipelineStrategy(StrategyContext context)
    : context_(std::move(context)),
      options_(context_.parallel.options.get<PipelineOptions>("pipeline")),
      schedule_(options_.schedule),
      precision_(context_.precision, context_.comm),
      world_(context_.comm) {
  check_model_and_world();
  auto& model = *context_.model;
  if (model.deferred()) {
    device_ = model.device();
  } else {
    for (const auto& p : model.parameters()) {
      device_ = p.device();
      break;
    }
  }
  const int world = world_->size();
  const int rank = world_->rank();
  if (mesh_set(context_.parallel.mesh)) {
    // The mesh's pp is the stages (resolve_mesh checked that parallel.pipeline.stages agrees).
    const auto mesh = resolve_mesh(context_.parallel, world);
    options_.stages = mesh->pp;
    layout_.shards = mesh->dp_shard;
    layout_.stages_outermost = true;
  }
  layout_.stages = check_options(options_, world);
  layout_.replicas = world / layout_.stages;
  layout_.stage = layout_.stage_of(rank);
  layout_.replica = layout_.replica_of(rank);
  const int layers = static_cast<int>(model.layers()->named_children().size());
  if (layout_.stages > layers) {
    throw std::invalid_argument(
        fmt::format("parallel.pipeline.stages: {} stages but model {} has {} layers; use at most {} stages",
                    layout_.stages, model.kind(), layers, layers));
  }
  const auto before = world_->stats();
  // Every rank starts from rank 0's weights (they may have been built from other seeds).
  verify_same_module(*world_, model);
  // A deferred model is built from train.seed alike on every rank, when materialized below.
  if (!model.deferred()) broadcast_coalesced(*world_, module_state(model), 0);
  parameter_counts_ = layer_parameter_counts(model);
  layout_.bounds = cut_layers(layers);
  if (model.deferred()) {
    // Only this stage's layers are built (Note [Deferred initialisation] in models/Network.h).
    std::vector<std::size_t> mine;
    for (int i = layout_.bounds[layout_.stage]; i < layout_.bounds[layout_.stage + 1]; ++i)
      mine.push_back(static_cast<std::size_t>(i));
    model.materialize(mine);
  }
  assign_tensors();
  split_groups();
  split_tie_groups();
  if (layout_.shards > 1) split_shard_groups();
  add_own_communication(comm::difference(world_->stats(), before));
  release_other_stages();
  if (layout_.shards > 1) shard_stage();
  build_optimizer();
}

void PipelineStrategy::check_model_and_world() const {
  if (!world_) {
    throw std::invalid_argument(
        "parallel.strategy: pipeline needs a communicator (start workers with --nproc)");
  }
  if (world_->backend() == "nccl" && world_->size() > 1) {
    throw std::invalid_argument(
        "parallel.strategy: pipeline passes activations and gradients as tagged point-to-point messages "
        "received ahead of need, and NCCL matches point-to-point messages by their order, not their tag; "
        "use parallel.backend: gloo or mpi (tensors on a GPU cross through host memory)");
  }
  const auto& model = *context_.model;
  if (typeid(model) != typeid(models::Network)) {
    throw std::invalid_argument(
        fmt::format("parallel.strategy: pipeline cuts a model's sequence of layers, but model {} computes "
                    "its forward pass otherwise (its class overrides Network::forward); choose another model "
                    "or strategy",
                    model.kind()));
  }
  if (model.single_module()) {
    throw std::invalid_argument(fmt::format(
        "parallel.strategy: pipeline cuts a torch::nn::Sequential into stages, but model {} is one module "
        "that is not a Sequential; build it as one (dtrain::models::network(name, "
        "torch::nn::Sequential(...)))",
        model.kind()));
  }
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto* embedding = dynamic_cast<const models::TokenEmbeddingImpl*>(item.value().get());
    if (embedding && embedding->shares_padding()) {
      throw std::invalid_argument(fmt::format(
          "parallel.strategy: pipeline cuts model {} into stages on several ranks, but on padded sentences "
          "(data set pad id) its embedding hands the padding mask to its blocks and head within one process "
          "(Note [Padding beside the activations]); use data_parallel or zero",
          model.kind()));
    }
  }
  if (context_.parallel.accumulation_steps != 1) {
    throw std::invalid_argument(fmt::format(
        "parallel.accumulation_steps: pipeline splits each batch into "
        "parallel.pipeline.micro_batches itself; found accumulation_steps {}, set it to 1 and raise "
        "micro_batches instead",
        context_.parallel.accumulation_steps));
  }
}

// The first layer of every stage, as parallel.pipeline.balance says: rank 0 times the layers
// (balance: time) and broadcasts the times, so every rank cuts at the same layers.
StageBounds PipelineStrategy::cut_layers(int layers) {
  if (options_.balance == Balance::CutPoints) {
    return bounds_from_cut_points(options_.cut_points, layers, layout_.stages);
  }
  if (options_.balance == Balance::Time) {
    if (context_.model->deferred()) {
      throw std::invalid_argument(
          "parallel.pipeline.balance: time runs every layer on rank 0, which model.deferred_init leaves "
          "unbuilt "
          "there; use balance: parameters or cut_points");
    }
    auto seconds = torch::zeros({layers}, torch::kDouble);
    if (world_->rank() == 0) {
      const auto measured = measure_layer_seconds(*context_.model, context_.input);
      for (int i = 0; i < layers; ++i) seconds[i] = measured[i];
    }
    world_->broadcast(seconds, 0);
    return balanced_bounds(
        std::vector<double>(seconds.data_ptr<double>(), seconds.data_ptr<double>() + layers), layout_.stages);
  }
  return balanced_bounds(parameter_counts_, layout_.stages);
}

// The model's parameters and buffers by layer, each with its stage; this stage's layers and
// tensors kept. A tensor two stages register cannot be cut, and a parameter outside the layers has
// no stage; a tied parameter another stage computes with is copied there (find_ties).
void PipelineStrategy::assign_tensors() {
  auto& model = *context_.model;
  const auto children = model.layers()->named_children();
  const auto all_layers = model.stages();
  std::map<const void*, std::pair<int, std::string>> owner;
  std::set<std::string> in_layers;
  for (int i = 0; i < static_cast<int>(children.size()); ++i) {
    const int stage = static_cast<int>(std::upper_bound(layout_.bounds.begin(), layout_.bounds.end(), i) -
                                       layout_.bounds.begin()) -
                      1;
    const std::string prefix = "layers." + children[i].key() + ".";
    auto add = [&](const std::string& rel, const torch::Tensor& t, bool buffer) {
      const auto name = prefix + rel;
      const auto [it, fresh] = owner.emplace(t.unsafeGetTensorImpl(), std::make_pair(stage, name));
      if (!fresh && it->second.first != stage) {
        throw std::invalid_argument(fmt::format(
            "parallel.pipeline.{}: {} and {} are one tensor shared by stages {} and {}; cut the model "
            "elsewhere (parallel.pipeline.balance: cut_points)",
            options_.balance == Balance::CutPoints ? "cut_points" : "balance", it->second.second, name,
            it->second.first, stage));
      }
      if (!fresh) return;
      in_layers.insert(name);
      entries_.push_back({name, stage, wire::shape_of(t), t.scalar_type(), buffer});
      if (stage != layout_.stage) return;
      (buffer ? buffers_ : parameters_).emplace_back(name, t);
    };
    for (const auto& p : children[i].value()->named_parameters(/*recurse=*/true))
      add(p.key(), p.value(), false);
    for (const auto& b : children[i].value()->named_buffers(/*recurse=*/true)) add(b.key(), b.value(), true);
    if (stage == layout_.stage) layers_.push_back(all_layers[i]);
  }
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (!in_layers.count(p.key())) {
      throw std::invalid_argument(
          fmt::format("parallel.strategy: pipeline cuts a model's sequence of layers, but model {} has "
                      "parameter {} outside them; choose another model or strategy",
                      model.kind(), p.key()));
    }
  }
  find_ties(owner);
}

// Pipelines are consecutive ranks; a stage group holds one stage of every pipeline. Collective:
// every rank takes part in every split.
void PipelineStrategy::split_groups() {
  const int stages = layout_.stages;
  for (int r = 0; r < layout_.replicas; ++r) {
    std::vector<int> ranks;
    // Ascending in the stage in either order, so a pipeline's communicator numbers its ranks by stage.
    for (int s = 0; s < stages; ++s) ranks.push_back(layout_.rank_of(r, s));
    auto sub = world_->split(ranks);
    if (sub) pipe_ = std::move(sub);
  }
  for (int s = 0; s < stages; ++s) {
    std::vector<int> ranks;
    for (int r = 0; r < layout_.replicas; ++r) ranks.push_back(layout_.rank_of(r, s));
    auto sub = world_->split(ranks);
    if (sub) group_ = std::move(sub);
  }
}

// Other stages' weights are not this rank's to keep: their memory goes back.
void PipelineStrategy::release_other_stages() {
  torch::NoGradGuard no_grad;
  std::set<std::string> mine;
  for (const auto& [name, t] : parameters_) mine.insert(name);
  for (const auto& [name, t] : buffers_) mine.insert(name);
  for (auto& p : context_.model->named_parameters(/*recurse=*/true)) {
    if (!mine.count(p.key())) p.value().set_data(torch::empty({0}, p.value().options()));
  }
  for (auto& b : context_.model->named_buffers(/*recurse=*/true)) {
    if (!mine.count(b.key())) b.value().set_data(torch::empty({0}, b.value().options()));
  }
}

void PipelineStrategy::build_optimizer() {
  std::vector<torch::Tensor> trainable;
  if (layout_.shards > 1) {
    trainable.push_back(stage_shard_);  // Note [A stage sharded over dp_shard]
  } else {
    for (const auto& [name, p] : optimized()) trainable.push_back(p);
  }
  optimizer_ = context_.make_optimizer(trainable);
  if (dynamic_cast<torch::optim::LBFGS*>(optimizer_.get())) {
    throw std::invalid_argument(
        "optim.name: lbfgs needs the whole gradient and loss at every line-search evaluation, which a "
        "pipeline's stages do not have; use sgd, adam or adamw with parallel.strategy: pipeline");
  }
  check_precision_optimizer(context_.precision, *optimizer_);
}

PipelineStrategy::~PipelineStrategy() = default;

void PipelineStrategy::set_learning_rate(double lr) {
  optim::set_learning_rate(*optimizer_, lr);
}

std::vector<comm::CommStats> PipelineStrategy::traffic_snapshot() const {
  return {world_->stats(), pipe_ ? pipe_->stats() : comm::CommStats{},
          group_ ? group_->stats() : comm::CommStats{}};
}

void PipelineStrategy::count_step_communication(const std::vector<comm::CommStats>& before,
                                                StepResult& result) {
  const auto now = traffic_snapshot();
  comm::CommStats step;
  for (std::size_t i = 0; i < now.size(); ++i) step += comm::difference(now[i], before[i]);
  add_own_communication(step);
  result.bytes_sent = step.total().wire_bytes;
}

void PipelineStrategy::allreduce_gradients(StepTiming& timing) {
  if (!group_ || group_->size() < 2) return;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (auto& [name, p] : optimized()) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    by_dtype[p.scalar_type()].push_back(p.grad());
  }
  for (auto& [dtype, grads] : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& g : grads) flat_parts.push_back(g.reshape({-1}));
    auto flat = torch::cat(flat_parts);
    const auto start = util::Clock::now();
    group_->allreduce(flat);
    timing.communication += util::seconds_since(start);
    std::int64_t offset = 0;
    for (auto& g : grads) {
      g.copy_(flat.slice(0, offset, offset + g.numel()).view_as(g));
      offset += g.numel();
    }
  }
}

MemoryFootprint PipelineStrategy::memory_footprint() const {
  std::vector<torch::Tensor> parameters, gradients;
  for (const auto& [name, p] : optimized()) {
    parameters.push_back(p);
    gradients.push_back(p.grad());
  }
  if (layout_.shards > 1) gradients.push_back(stage_shard_.grad());
  return footprint_of(parameters, gradients, optim::optimizer_state_tensors(*optimizer_));
}

MemoryFootprint PipelineStrategy::planned_footprint() const {
  std::vector<torch::Tensor> parameters, trainable;
  for (const auto& [name, p] : parameters_) {
    parameters.push_back(p);
    if (p.requires_grad()) trainable.push_back(p);
  }
  MemoryFootprint plan;
  plan.parameters = optim::unique_storage_bytes(parameters);
  // The stage's whole gradient until the step reduces it, and with dp_shard the shard's beside it.
  plan.gradients = optim::unique_storage_bytes(trainable);
  if (layout_.shards > 1) {
    plan.step_gradients = plan.gradients;  // freed once the shard's gradient is reduced out of it
    plan.gradients += stage_shard_.numel() * stage_shard_.element_size();
  }
  plan.optimizer_state = optim::planned_optimizer_state_bytes(*optimizer_);
  return plan;
}

namespace {

StrategyInfo pipeline_info() {
  StrategyInfo info{
      "pipeline",
      "the model's layers cut into stages across ranks; micro-batches flow forward and back (GPipe, "
      "1F1B); world = replicas x stages",
      /*exact=*/true, /*needs_communicator=*/true, [](StrategyContext c) -> std::unique_ptr<Strategy> {
        return std::make_unique<PipelineStrategy>(std::move(c));
      }};
  // One data holder per rank (a pipeline's batch is its ranks' batches); also what `dtrain train
  // --nproc` checks before it starts workers.
  info.data_holders = [](const config::ParallelConfig& parallel, int world) {
    check_options(parallel.options.get<PipelineOptions>("pipeline"), world);
    return world;
  };
  // Activations and gradients by tag, received ahead of need.
  info.host_point_to_point = [](const config::ParallelConfig&) { return true; };
  info.materializes_stages = true;  // its stage's layers only
  auto& can = info.capabilities;
  can.fixed_because = "each member holds its own stages, which another number of members splits otherwise";
  can.fp16 = true;
  info.mesh.dims = {MeshDim::Pp, MeshDim::DpReplicate, MeshDim::DpShard, MeshDim::Tp};
  info.mesh.because =
      "it cuts the layers into pp stages, shards each stage's gradients and optimizer state over dp_shard "
      "and "
      "all-reduces the shards over dp_replicate";
  info.mesh.own_degree = [](const config::ParallelConfig& parallel, MeshDim dim) {
    return dim == MeshDim::Pp ? parallel.options.get<PipelineOptions>("pipeline").stages : 0;
  };
  info.mesh.implied = [](const config::ParallelConfig& parallel, int world) -> std::optional<MeshShape> {
    const int stages = parallel.options.get<PipelineOptions>("pipeline").stages;
    const int pp = stages == 0 ? world : stages;
    if (world % pp != 0) return std::nullopt;  // check_options names the key
    return MeshShape{pp, world / pp, 1};
  };
  // lbfgs refused: its line search needs the whole gradient and loss at every evaluation.
  return info;
}

}  // namespace

}  // namespace dtrain::parallel::pipeline

namespace dtrain::parallel {
DTRAIN_REGISTER_STRATEGY(pipeline, pipeline::pipeline_info(), pipeline::PipelineOptions{},
                         pipeline::describe_options);
}  // namespace dtrain::parallel
