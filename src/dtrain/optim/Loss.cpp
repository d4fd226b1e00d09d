// The losses behind create_loss(); see Note [nll on logits].
#include "dtrain/optim/Loss.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/functional/loss.h>

#include <stdexcept>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"

namespace dtrain::optim {

namespace {

// (2, 3) -> "(2, 3)" for error messages.
std::string shape(const at::Tensor& t) {
  return fmt::format("({})", fmt::join(t.sizes(), ", "));
}

// (N, T, V) outputs and (N, T) targets -> (N*T, V) and (N*T): one prediction per position.
std::pair<at::Tensor, at::Tensor> flatten_sequence(const at::Tensor& outputs, const at::Tensor& targets) {
  if (outputs.dim() == 3 && targets.dim() == 2) {
    return {outputs.reshape({-1, outputs.size(-1)}), targets.reshape({-1})};
  }
  return {outputs, targets};
}

void check_class_targets(const std::string& loss, const at::Tensor& outputs, const at::Tensor& targets) {
  const bool ok = outputs.dim() == 2 && targets.dim() == 1 && targets.size(0) == outputs.size(0) &&
                  !at::isFloatingType(targets.scalar_type());
  if (!ok) {
    throw std::invalid_argument(fmt::format(
        "{}: expected outputs (N, C) or (N, T, V) with integer class targets (N) or (N, T), found outputs {} "
        "and targets {} of type {}",
        loss, shape(outputs), shape(targets), c10::toString(targets.scalar_type())));
  }
}

at::Tensor cross_entropy(const at::Tensor& outputs, const at::Tensor& targets) {
  auto [logits, classes] = flatten_sequence(outputs, targets);
  check_class_targets("cross_entropy", logits, classes);
  return torch::nn::functional::cross_entropy(logits, classes);
}

at::Tensor nll(const at::Tensor& outputs, const at::Tensor& targets) {
  auto [logits, classes] = flatten_sequence(outputs, targets);
  check_class_targets("nll", logits, classes);
  return torch::nll_loss(torch::log_softmax(logits, 1), classes);
}

at::Tensor mse(const at::Tensor& outputs, const at::Tensor& targets) {
  if (!at::isFloatingType(targets.scalar_type())) {
    auto [predictions, classes] = flatten_sequence(outputs, targets);
    check_class_targets("mse", predictions, classes);
    auto one_hot = torch::one_hot(classes, predictions.size(1)).to(predictions.scalar_type());
    return torch::mse_loss(predictions, one_hot);
  }
  if (outputs.sizes() != targets.sizes()) {
    throw std::invalid_argument(fmt::format(
        "mse: expected floating targets shaped like the outputs {}, found {}; or give integer class targets",
        shape(outputs), shape(targets)));
  }
  return torch::mse_loss(outputs, targets);
}

struct LossEntry {
  config::Choice choice;
  LossFn loss;
};

// Every loss, written once; config/ validates optim.loss against this list.
std::vector<LossEntry> builtin_losses() {
  return {
      {{"cross_entropy", "softmax cross-entropy on logits", {"crossentropy", "CrossEntropyLoss", "ce"}},
       cross_entropy},
      {{"nll", "negative log-likelihood of the model's distribution (log_softmax applied)", {"NLLLoss"}},
       nll},
      {{"mse", "mean squared error; integer class targets are one-hot encoded", {"MSELoss"}}, mse},
  };
}

// The built-in losses, registered on first use, then a program's own (register_loss), which may
// register at static initialisation before this file does.
std::vector<LossEntry>& loss_table() {
  static std::vector<LossEntry> table = [] {
    auto losses = builtin_losses();
    for (const auto& entry : losses) config::register_choice(config::kLossKey, entry.choice);
    return losses;
  }();
  return table;
}

[[maybe_unused]] const bool kLossesRegistered = !loss_table().empty();

}  // namespace

bool register_loss(config::Choice choice, LossFn loss) {
  if (!loss) throw std::logic_error("register_loss(" + choice.name + "): the loss function is empty");
  auto& table = loss_table();
  config::register_choice(config::kLossKey, choice);
  table.push_back({std::move(choice), std::move(loss)});
  return true;
}

LossFn create_loss(const std::string& name) {
  const auto& names = config::registered_choices(config::kLossKey);
  const auto canonical = names.resolve(name);
  for (const auto& entry : loss_table()) {
    if (canonical && entry.choice.name == *canonical) return entry.loss;
  }
  throw std::invalid_argument(
      fmt::format("optim.loss: expected one of {}, found '{}'; set optim.loss", names.list(), name));
}

}  // namespace dtrain::optim

DTRAIN_LINK_ANCHOR(dtrain_losses_registry);
