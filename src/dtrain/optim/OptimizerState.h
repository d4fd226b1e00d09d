// An optimizer's state keyed by parameter name, so that it outlives the way a strategy holds its
// parameters: a run saved by one strategy or world size continues under another (see Note
// [Checkpoint layout] in parallel/Strategy.h). sgd, adam and adamw keep per-parameter tensors;
// lbfgs keeps one history over all parameters, stored as LibTorch's own archive.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::optim {

using NamedParameters = std::vector<std::pair<std::string, torch::Tensor>>;

// "optimizer/<parameter>/<field>" -> tensor for every state field the optimizer holds (none
// before its first step; sgd without momentum has none), or "optimizer/lbfgs" -> the archive's
// bytes. `parameters` are the optimizer's, in its order, with their names.
std::map<std::string, torch::Tensor> named_optimizer_state(const torch::optim::Optimizer& optimizer,
                                                           const NamedParameters& parameters);

// Restores what named_optimizer_state() wrote (parameters matched by name; a parameter without
// entries starts fresh). An entry "optimizer" alone is the archive older checkpoints hold. Throws
// std::invalid_argument when an entry's shape does not fit its parameter or the entries belong to another
// kind of optimizer.
void load_named_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParameters& parameters,
                                const std::map<std::string, torch::Tensor>& entries);

// Every tensor the optimizer's state holds (sgd's momentum, Adam's moments, L-BFGS's history), for
// counting the bytes a rank keeps (parallel::MemoryFootprint). Empty before the first step.
std::vector<torch::Tensor> optimizer_state_tensors(const torch::optim::Optimizer& optimizer);

// The bytes optimizer_state_tensors() holds once every parameter has stepped, from the parameters'
// bytes and the options, before the first step: sgd's momentum (1x, none without momentum), adam's
// and adamw's moments (2x, 3x with amsgrad), lbfgs's history (2 history_size + 3 flat copies).
std::uint64_t planned_optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

// The bytes of the storages behind `tensors`, each storage counted once (views of one flat
// buffer count as the buffer); undefined tensors count nothing.
std::uint64_t unique_storage_bytes(const std::vector<torch::Tensor>& tensors);

}  // namespace dtrain::optim
