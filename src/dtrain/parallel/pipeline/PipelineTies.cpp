// Tied parameters across pipeline stages: a parameter one stage owns (GPT's token embedding) that
// a stage on another rank computes with (its output layer); the user stage keeps a copy of its own
// and the two stages all-reduce their gradients after every step's backward.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline {

// Note [Tied embeddings across pipeline stages]
// GPT-2's output layer computes with the token embedding's weight. On one rank that is one
// parameter (models/TiedParameters.h) whose gradient autograd sums over both uses. Cut into
// stages, the embedding lives on the first stage and the output layer on the last, so the last
// stage holds a copy of its own: both start from rank 0's weights (broadcast before the cut),
// after each step's backward the two stages of a pipeline all-reduce (sum) their gradients of it,
// which is the one-process gradient, and every optimizer we allow applies the same element-wise
// update to the same values, so the copies stay equal bit for bit. The all-reduce runs before the
// replicas' all-reduce of each stage's gradients; the sums commute.
// Megatron-LM does the same in outline: the first and last stages form an embedding group, and
// _allreduce_word_embedding_grads sums the word embedding's gradients over it after backward.
// What dtrain does otherwise: the tie is found from the model (a module that computes with a
// parameter it does not register, models/TiedParameters.h) rather than declared by a model flag
// (share_embeddings_and_output_weights) and a stage's position; the last stage's copy starts from
// the weights every rank already holds, where Megatron fills its copy with zeros and all-reduces
// the embedding into it at initialisation (setup_embeddings_and_output_layer); and the checkpoint
// is dtrain's consolidated one, the parameter once under its owner's name, from which the copy
// loads, so it resumes under any strategy and any cut (Megatron's distributed checkpoint maps the
// copy onto the embedding's key as a replica; its older per-rank files kept it in the last
// stage's). dp_shard over a stage with a tie is refused.

void PipelineStrategy::find_ties(const std::map<const void*, std::pair<int, std::string>>& owner) {
  auto& model = *context_.model;
  const auto children = model.layers()->named_children();
  for (int i = 0; i < static_cast<int>(children.size()); ++i) {
    const int stage = static_cast<int>(std::upper_bound(layout_.bounds.begin(), layout_.bounds.end(), i) -
                                       layout_.bounds.begin()) -
                      1;
    for (const auto& [path, user] : models::tied_parameter_users(*children[i].value())) {
      const auto it = owner.find(user->tied_parameter().unsafeGetTensorImpl());
      if (it == owner.end()) {
        throw std::invalid_argument(fmt::format(
            "parallel.strategy: pipeline: layer {} computes with a tied parameter that no layer of model {} "
            "registers; register it in the layer that owns it",
            children[i].key(), model.kind()));
      }
      if (it->second.first == stage) continue;  // one stage: one parameter, as on one rank
      if (layout_.shards > 1) {
        throw std::invalid_argument(fmt::format(
            "parallel.mesh.dp_shard: pipeline stages {} and {} share {} (tied), and a sharded stage cannot "
            "keep a copy of it; set model.tie_embeddings: false (gpt; a model of one's own: untie it) or "
            "leave parallel.mesh.dp_shard out",
            it->second.first, stage, it->second.second));
      }
      Tie tie;
      tie.name = it->second.second;
      tie.owner = it->second.first;
      tie.user = stage;
      tie.module = user;
      ties_.push_back(std::move(tie));
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& tie : ties_) {
    if (tie.user != layout_.stage) continue;
    auto copy = tie.module->tied_parameter().detach().clone().set_requires_grad(true);
    tie.module->use_tied_parameter(copy);
    tied_copies_.emplace_back(tie.name, copy);
  }
}

// One two-rank group per tie and pipeline; every rank takes part in every split.
void PipelineStrategy::split_tie_groups() {
  for (auto& tie : ties_) {
    for (int r = 0; r < layout_.replicas; ++r) {
      const int owner = layout_.rank_of(r, tie.owner);
      const int user = layout_.rank_of(r, tie.user);
      auto sub = world_->split({std::min(owner, user), std::max(owner, user)});
      if (sub) tie.pair = std::move(sub);
    }
  }
}

std::vector<std::pair<std::string, torch::Tensor>> PipelineStrategy::optimized() const {
  auto all = parameters_;
  all.insert(all.end(), tied_copies_.begin(), tied_copies_.end());
  return all;
}

void PipelineStrategy::allreduce_tied_gradients(StepTiming& timing) {
  for (const auto& tie : ties_) {
    if (!tie.pair) continue;
    torch::Tensor tensor;
    const auto& named = tie.user == layout_.stage ? tied_copies_ : parameters_;
    for (const auto& [name, t] : named) {
      if (name == tie.name) tensor = t;
    }
    TORCH_INTERNAL_ASSERT(tensor.defined(), "pipeline: tied parameter ", tie.name, " not on its stage");
    if (!tensor.grad().defined()) tensor.mutable_grad() = torch::zeros_like(tensor);
    const auto start = util::Clock::now();
    tie.pair->allreduce(tensor.mutable_grad());
    timing.communication += util::seconds_since(start);
  }
}

}  // namespace dtrain::parallel::pipeline
