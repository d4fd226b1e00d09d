// See ReplicaStrategy.h.
#include "dtrain/parallel/ReplicaStrategy.h"

#include <torch/optim/lbfgs.h>
#include <torch/torch.h>

#include "dtrain/optim/OptimizerState.h"

namespace dtrain::parallel {
namespace {

optim::NamedParameters named_parameters(const torch::nn::Module& module) {
  optim::NamedParameters out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  return out;
}

}  // namespace

ReplicaStrategy::ReplicaStrategy(StrategyContext context)
    : context_(std::move(context)), precision_(context_.precision, context_.comm) {
  optimizer_ = context_.make_optimizer(context_.model->parameters());
  check_precision_optimizer(context_.precision, *optimizer_);
}

ForwardFn ReplicaStrategy::forward_fn() {
  return [this](const torch::Tensor& x) { return precision_.forward(*context_.model, x); };
}

void ReplicaStrategy::step_with(const std::function<torch::Tensor()>& closure, StepResult& result) {
  if (!precision_.scaling()) {
    result.closure_evaluations = step_optimizer(closure);
    return;
  }
  const auto parameters = context_.model->parameters();
  {
    const auto half = precision_.half_weights(parameters);
    closure();
  }
  result.closure_evaluations = 1;  // lbfgs, the optimizer that evaluates more, is refused with fp16
  closure_evaluations_ += 1;
  precision_.finish_gradients_on_device(parameters, &result.timing.communication);
  precision_.step(*optimizer_);
  result.skipped = precision_.last_skipped();
  result.loss_scale = precision_.loss_scale_figure();
}

void ReplicaStrategy::set_learning_rate(double lr) {
  optim::set_learning_rate(*optimizer_, lr);
}

void ReplicaStrategy::begin_evaluation() {
  context_.model->eval();
}

torch::Tensor ReplicaStrategy::eval_forward(std::size_t, const torch::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  return context_.model->forward(inputs);
}

void ReplicaStrategy::end_evaluation() {
  context_.model->train();
}

std::map<std::string, torch::Tensor> ReplicaStrategy::model_state() const {
  std::map<std::string, torch::Tensor> state;
  for (const auto& p : context_.model->named_parameters(/*recurse=*/true))
    state[p.key()] = p.value().detach();
  for (const auto& b : context_.model->named_buffers(/*recurse=*/true)) state[b.key()] = b.value().detach();
  return state;
}

MemoryFootprint ReplicaStrategy::memory_footprint() const {
  return module_footprint(*context_.model, optim::optimizer_state_tensors(*optimizer_));
}

MemoryFootprint ReplicaStrategy::planned_footprint() const {
  std::vector<torch::Tensor> parameters, trainable;
  for (const auto& p : context_.model->parameters()) {
    parameters.push_back(p);
    if (p.requires_grad()) trainable.push_back(p);
  }
  MemoryFootprint plan;
  plan.parameters = optim::unique_storage_bytes(parameters);
  plan.gradients = optim::unique_storage_bytes(trainable);  // a gradient the size of each
  plan.optimizer_state = optim::planned_optimizer_state_bytes(*optimizer_);
  return plan;
}

void ReplicaStrategy::save(io::Checkpoint& checkpoint) const {
  checkpoint.set_module_state("model", *context_.model);
  for (const auto& [key, value] :
       optim::named_optimizer_state(*optimizer_, named_parameters(*context_.model))) {
    checkpoint.set_tensor(key, value);
  }
  precision_.save(checkpoint);
}

void ReplicaStrategy::load(const io::Checkpoint& checkpoint) {
  checkpoint.load_module_state("model", *context_.model);
  std::map<std::string, torch::Tensor> entries;
  for (const auto& [key, value] : checkpoint.tensors()) {
    if (key.rfind("optimizer", 0) == 0) entries.emplace(key, value);
  }
  optim::load_named_optimizer_state(*optimizer_, named_parameters(*context_.model), entries);
  precision_.load(checkpoint);
}

std::int64_t ReplicaStrategy::step_optimizer(const std::function<torch::Tensor()>& closure) {
  std::int64_t evaluations = 0;
  optimizer_->step([&]() -> torch::Tensor {
    ++evaluations;
    return closure();
  });
  closure_evaluations_ += evaluations;
  fill_lbfgs_scratch();
  return evaluations;
}

// LibTorch's L-BFGS keeps `al` as a vector of history_size tensors, defined only as far as the
// history has grown; its archive cannot hold an undefined tensor, so a checkpoint (or model.pt's
// run end) before the history is full failed with "Cannot access storage of UndefinedTensorImpl".
// `al` is scratch: step() writes al[i] before it reads it, for every i it uses, so a zero there
// changes nothing but makes the state saveable.
void ReplicaStrategy::fill_lbfgs_scratch() {
  auto* lbfgs = dynamic_cast<torch::optim::LBFGS*>(optimizer_.get());
  if (!lbfgs) return;
  for (auto& entry : lbfgs->state()) {
    auto& state = static_cast<torch::optim::LBFGSParamState&>(*entry.second);
    if (!state.al()) continue;
    auto al = *state.al();
    bool filled = false;
    for (auto& a : al) {
      if (a.defined()) continue;
      a = torch::zeros({}, state.d().defined() ? state.d().options() : torch::TensorOptions());
      filled = true;
    }
    if (filled) state.al(std::move(al));
  }
}

std::map<std::string, double> ReplicaStrategy::metrics() {
  return {{"optim/closure_evaluations", static_cast<double>(closure_evaluations_)}};
}

}  // namespace dtrain::parallel
