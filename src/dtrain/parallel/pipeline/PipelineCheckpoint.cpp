// The pipeline's model state and checkpoints: every stage's part broadcast or gathered from the
// first pipeline, saved whole by name (Note [Checkpoint layout]) so that any strategy or world
// size resumes it.
#include <fmt/format.h>
#include <torch/torch.h>

#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/ModuleSync.h"
#include "dtrain/parallel/pipeline/PipelineMessages.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"

namespace dtrain::parallel::pipeline {

using namespace wire;

std::map<std::string, torch::Tensor> PipelineStrategy::model_state() const {
  std::map<std::string, torch::Tensor> state;
  for (int s = 0; s < layout_.stages; ++s) {
    // Stage s of the first pipeline is the root; the others receive its values.
    std::vector<torch::Tensor> tensors;
    std::vector<std::string> names;
    if (s == layout_.stage && layout_.replica == 0) {
      for (const auto* named : {&parameters_, &buffers_}) {
        for (const auto& [name, t] : *named) {
          names.push_back(name);
          tensors.push_back(t.detach().clone());
        }
      }
    } else {
      // Parameters first, then buffers, as the root lists them.
      for (const bool buffers : {false, true}) {
        for (const auto& e : entries_) {
          if (e.stage != s || e.buffer != buffers) continue;
          names.push_back(e.name);
          tensors.push_back(torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype).device(device_)));
        }
      }
    }
    broadcast_coalesced(*world_, tensors, layout_.rank_of(0, s));
    for (std::size_t i = 0; i < names.size(); ++i) state[names[i]] = tensors[i];
  }
  return state;
}

void PipelineStrategy::save(io::Checkpoint& checkpoint) const {
  for (const auto& [name, tensor] : model_state()) checkpoint.set_tensor("model." + name, tensor);
  const auto mine = stage_optimizer_state();  // collective within a shard group
  const int rank = world_->rank();
  if (rank == 0) {
    for (const auto& [key, value] : mine) checkpoint.set_tensor(key, value);
    for (int s = 1; s < layout_.stages; ++s) {
      const int from = layout_.rank_of(0, s);
      const auto length = receive(*world_, {1}, torch::kLong, from, kTagSaveLength, nullptr);
      const auto bytes =
          receive(*world_, {length.item<std::int64_t>()}, torch::kUInt8, from, kTagSaveBytes, nullptr);
      for (const auto& [key, value] : unpack(bytes)) checkpoint.set_tensor(key, value);
    }
  } else if (layout_.replica == 0) {
    Sends sends(world_.get());
    auto bytes = pack(mine);
    sends.post(torch::tensor({bytes.numel()}, torch::kLong), 0, kTagSaveLength);
    sends.post(bytes, 0, kTagSaveBytes);
    sends.wait_all();
  }
  precision_.save(checkpoint);
}

void PipelineStrategy::load(const io::Checkpoint& checkpoint) {
  torch::NoGradGuard no_grad;
  // A tied copy loads from its owner's entry (Note [Tied embeddings across pipeline stages]).
  for (auto* named : {&parameters_, &buffers_, &tied_copies_}) {
    for (auto& [name, t] : *named) {
      const auto& saved = checkpoint.tensor("model." + name);
      if (saved.sizes() != t.sizes()) {
        throw io::CheckpointError(fmt::format("checkpoint: model.{} has shape {}, this model's {}", name,
                                              c10::str(saved.sizes()), c10::str(t.sizes())));
      }
      t.copy_(saved);
    }
  }
  load_stage_optimizer_state(checkpoint);
  precision_.load(checkpoint);
}

}  // namespace dtrain::parallel::pipeline
