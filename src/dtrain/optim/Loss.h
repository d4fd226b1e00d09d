// Losses by name: cross_entropy, nll, mse, as callables (outputs, targets) -> scalar mean loss.
// They accept a classifier's (N, C) outputs with (N) class targets and a language model's
// (N, T, V) outputs with (N, T) targets (flattened to N*T predictions).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/config/Options.h"

namespace dtrain::optim {

using LossFn = std::function<at::Tensor(const at::Tensor& outputs, const at::Tensor& targets)>;

// Note [nll on logits]
// dtrain's models end in logits (mnistnet, like Catalyst dAD's, in log-probabilities). nll here is
// the negative log-likelihood of the model's distribution: it applies log_softmax first, which
// leaves log-probabilities unchanged, so it is PyTorch's NLLLoss on log-probability outputs and
// still a correct loss on raw logits.
//
// mse with integer class targets compares the outputs with one-hot targets; with floating targets
// of the outputs' shape it is plain mean squared error.
//
// Names are case-insensitive; PyTorch's class names (CrossEntropyLoss, NLLLoss, MSELoss) are
// accepted too. Throws std::invalid_argument for an unknown name.
LossFn create_loss(const std::string& name);

// Registers a loss of one's own under choice.name for optim.loss (listed in `--help` with
// choice.help), before any configuration is parsed. `loss` returns the mean over the batch's
// samples, as the strategies that split a batch expect (they weight each part's loss by its share
// of the samples). Returns true; throws std::logic_error when the name or an alias is taken.
bool register_loss(config::Choice choice, LossFn loss);

}  // namespace dtrain::optim
