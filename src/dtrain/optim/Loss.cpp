// The losses behind create_loss(); see Note [nll on logits].
#include "dtrain/optim/Loss.h"

#include <fmt/format.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace dtrain::optim {

const std::vector<std::string>& known_losses() {
  static const std::vector<std::string> names{"cross_entropy", "nll", "mse"};
  return names;
}

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

}  // namespace

LossFn create_loss(const std::string& name) {
  std::string key = name;
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (key == "cross_entropy" || key == "crossentropy" || key == "crossentropyloss" || key == "ce") {
    return cross_entropy;
  }
  if (key == "nll" || key == "nllloss") return nll;
  if (key == "mse" || key == "mseloss") return mse;
  throw std::invalid_argument(fmt::format("optim.loss: expected one of {}, found '{}'; set optim.loss",
                                          fmt::join(known_losses(), ", "), name));
}

}  // namespace dtrain::optim
