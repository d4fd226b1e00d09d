// The zero strategy's model state and checkpoints: the shards and their optimizer state gathered
// and cut back into whole tensors by parameter name (Note [Checkpoint layout]), so a checkpoint
// reads under any world size and strategy, and loaded back into this rank's shards.
#include <fmt/format.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/zero/ZeroStrategy.h"

namespace dtrain::parallel {

namespace {

std::string unit_key(std::size_t u) {
  return fmt::format("zero_unit_{}", u);
}

}  // namespace

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
  for (std::size_t u = 0; u < units_.size(); ++u) {
    // Within the shard group: every replica holds the same state, so its group's gather is whole.
    for (const auto& [key, value] :
         zero::whole_optimizer_state(units_[u].layout, unit_key(u), state, shard_.get()))
      checkpoint.set_tensor(key, value);
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
    named.emplace_back(unit_key(u), units_[u].shard);
    zero::add_shard_optimizer_entries(units_[u].layout, unit_key(u), rank_, checkpoint, entries);
  }
  optim::load_named_optimizer_state(*optimizer_, named, entries);
  precision_.load(checkpoint);
}

}  // namespace dtrain::parallel
