// The pipeline over parallel.mesh.dp_shard: each stage's optimizer state and gradients sharded
// over the stage's replicas, as DeepSpeed's pipeline engine runs ZeRO beside its stages.
#include <fmt/format.h>
#include <torch/torch.h>

#include <stdexcept>

#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline {

// Note [A stage sharded over dp_shard]
// On the mesh {pp, dp_replicate, dp_shard}, a stage's R x S replicas (consecutive ranks, replica
// index q = r S + s) form R shard groups of S. The stage's trainable parameters live in one flat
// buffer padded to a multiple of S (zero's UnitLayout, Note [Padding is explicit]); the optimizer
// updates only this rank's shard, an alias of its part of the buffer. After the schedule the
// accumulated gradients go into the flat layout and are reduce-scattered (a sum) within the shard
// group, each shard is all-reduced across the R groups, the optimizer steps on the shard, and the
// shards are all-gathered back into every rank's buffer: the same bytes as the all-reduce it
// replaces (a reduce-scatter and an all-gather are its two halves) and, every optimizer we allow
// being element-wise, the same update. Between steps a rank holds its stage's whole parameters but
// only 1/S of their gradients and optimizer state: ZeRO's stage 2. The parameters stay whole
// because each micro-batch's forward and backward needs them; gathering them per micro-batch
// (ZeRO-3) would multiply the all-gathers by the micro-batches, which is why DeepSpeed's pipeline
// refuses stage 3 and torchtitan's keeps the parameters gathered through a step.

void PipelineStrategy::split_shard_groups() {
  const int shards = layout_.shards;
  const int groups = layout_.replicas / shards;
  for (int s = 0; s < layout_.stages; ++s) {
    for (int g = 0; g < groups; ++g) {
      std::vector<int> ranks;
      for (int i = 0; i < shards; ++i) ranks.push_back(layout_.rank_of(g * shards + i, s));
      auto sub = world_->split(ranks);
      if (sub) shard_group_ = std::move(sub);
    }
    if (groups == 1) continue;
    for (int i = 0; i < shards; ++i) {
      std::vector<int> ranks;
      for (int g = 0; g < groups; ++g) ranks.push_back(layout_.rank_of(g * shards + i, s));
      auto sub = world_->split(ranks);
      if (sub) across_groups_ = std::move(sub);
    }
  }
}

void PipelineStrategy::shard_stage() {
  torch::NoGradGuard no_grad;
  const int shards = layout_.shards;
  auto& unit = stage_unit_;
  unit.stage = layout_.stage;
  for (const auto& [name, p] : parameters_) {
    if (!p.requires_grad()) continue;  // model.freeze: never updated, nothing to shard
    if (!unit.params.empty()) {
      const auto& first = unit.params.front().param;
      if (first.scalar_type() != p.scalar_type() || first.device() != p.device()) {
        throw std::invalid_argument(fmt::format(
            "parallel.mesh.dp_shard: parameter '{}' is {} on {}, the rest of pipeline stage {} {} on {}; a "
            "sharded stage keeps its parameters in one flat buffer, so give them one dtype and device",
            name, c10::toString(p.scalar_type()), p.device().str(), layout_.stage,
            c10::toString(first.scalar_type()), first.device().str()));
      }
    }
    unit.params.push_back(zero::UnitParameter{name, p, unit.numel, p.numel()});
    unit.numel += p.numel();
  }
  if (unit.params.empty()) {
    throw std::invalid_argument(
        fmt::format("parallel.mesh.dp_shard: pipeline stage {} has no trainable parameters to shard; cut the "
                    "model elsewhere (parallel.pipeline.balance) or leave dp_shard out",
                    layout_.stage));
  }
  unit.shard = (unit.numel + shards - 1) / shards;
  unit.padded = unit.shard * shards;
  stage_flat_ = torch::zeros({unit.padded}, unit.params.front().param.options().requires_grad(false));
  for (auto& p : unit.params) {
    stage_flat_.narrow(0, p.offset, p.numel).copy_(p.param.detach().reshape({-1}));
    p.param.set_data(zero::alias(stage_flat_, p.offset, p.param.sizes()));
  }
  stage_shard_ = zero::alias(stage_flat_, shard_group_->rank() * unit.shard, {unit.shard});
  stage_shard_.set_requires_grad(true);  // trainable: the run's optimizer factory leaves out frozen tensors
}

void PipelineStrategy::gradients_into_flat_buffer() {
  // Autograd adds each micro-batch's gradient into a defined grad() in place, so the stage's whole
  // gradient builds up in the one buffer the reduce-scatter sends, with no copy beside it.
  torch::NoGradGuard no_grad;
  stage_grad_flat_ = torch::zeros({stage_unit_.padded}, stage_flat_.options());
  for (const auto& p : stage_unit_.params)
    p.param.mutable_grad() = zero::alias(stage_grad_flat_, p.offset, p.param.sizes());
}

std::vector<torch::Tensor> PipelineStrategy::reduce_scatter_gradients(StepTiming& timing) {
  torch::NoGradGuard no_grad;
  const auto& unit = stage_unit_;
  auto flat = std::move(stage_grad_flat_);
  stage_grad_flat_ = torch::Tensor();
  for (const auto& p : unit.params) {
    // A gradient autograd replaced rather than added to (none does today) is copied in.
    const auto& grad = p.param.grad();
    if (grad.defined() && grad.data_ptr() != flat.narrow(0, p.offset, 1).data_ptr())
      flat.narrow(0, p.offset, p.numel).copy_(grad.reshape({-1}));
    p.param.mutable_grad() = torch::Tensor();  // the whole gradient goes; the shard is what stays
  }
  // The last step's shard gradient (zeroed since) is the output: one shard-sized buffer, not two.
  auto shard_grad =
      stage_shard_.grad().defined() ? stage_shard_.grad() : torch::empty({unit.shard}, flat.options());
  const auto start = util::Clock::now();
  shard_group_->reduce_scatter(flat, shard_grad);
  if (across_groups_) across_groups_->allreduce(shard_grad);
  timing.communication += util::seconds_since(start);
  stage_shard_.mutable_grad() = shard_grad;
  return {stage_shard_};
}

void PipelineStrategy::gather_parameters(StepTiming& timing) {
  torch::NoGradGuard no_grad;
  // The shard is part of the buffer the gather fills: it travels as a copy.
  const auto mine = stage_shard_.detach().clone();
  const auto start = util::Clock::now();
  shard_group_->allgather(mine, stage_flat_);
  timing.communication += util::seconds_since(start);
}

std::map<std::string, torch::Tensor> PipelineStrategy::stage_optimizer_state() const {
  if (layout_.shards == 1) return optim::named_optimizer_state(*optimizer_, optimized());
  const optim::NamedParameters named{{"pipeline_stage", stage_shard_}};
  return zero::whole_optimizer_state(stage_unit_, "pipeline_stage",
                                     optim::named_optimizer_state(*optimizer_, named), shard_group_.get());
}

void PipelineStrategy::load_stage_optimizer_state(const io::Checkpoint& checkpoint) {
  if (layout_.shards > 1 && (checkpoint.contains("optimizer") || checkpoint.contains("optimizer/lbfgs"))) {
    throw std::invalid_argument(
        "checkpoint: its optimizer state is one LibTorch archive (a checkpoint older than named optimizer "
        "state), which parallel.mesh.dp_shard cannot split into shards; resume it without dp_shard");
  }
  std::map<std::string, torch::Tensor> entries;
  if (layout_.shards == 1) {
    for (const auto& [key, value] : checkpoint.tensors()) {
      if (key.rfind("optimizer", 0) == 0) entries.emplace(key, value);
    }
    optim::load_named_optimizer_state(*optimizer_, optimized(), entries);
    return;
  }
  zero::add_shard_optimizer_entries(stage_unit_, "pipeline_stage", shard_group_->rank(), checkpoint, entries);
  optim::load_named_optimizer_state(*optimizer_, {{"pipeline_stage", stage_shard_}}, entries);
}

}  // namespace dtrain::parallel::pipeline
