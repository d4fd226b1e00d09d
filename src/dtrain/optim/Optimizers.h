// Optimizers by name (sgd with momentum/nesterov/weight decay, adam, adamw, lbfgs) from
// config::OptimConfig, and the two things the trainer needs beyond step(): the learning rate of
// every param group (schedulers set it each step) and the optimizer state in a checkpoint.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"

namespace dtrain::optim {

// Builds config.name (registered with config/; matched without regard to case) over `parameters`. Throws
// std::invalid_argument for an unknown name or an option the optimizer cannot honour (nesterov without
// momentum, weight decay with lbfgs), rather than silently ignoring it. lbfgs's step() needs a closure.
std::unique_ptr<torch::optim::Optimizer> create_optimizer(std::vector<torch::Tensor> parameters,
                                                          const config::OptimConfig& config);

// Builds the configured optimizer over whichever parameters a strategy updates (all of them, a
// shard, a pipeline stage, one graph node's copy). The configuration is checked here already.
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor> parameters)>;
OptimizerFactory optimizer_factory(const config::OptimConfig& config);

// The learning rate of the first param group (all groups share it unless a caller changed one).
double learning_rate(const torch::optim::Optimizer& optimizer);
// Sets the learning rate of every param group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// The optimizer's state (momentum buffers, Adam moments, L-BFGS history) under `key`, so one
// checkpoint archive can hold the model, the optimizer and the trainer's position side by side.
void save_optimizer_state(const torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& archive,
                          const std::string& key = "optimizer");
// The optimizer must have been built with the same parameters, in the same order.
void load_optimizer_state(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive,
                          const std::string& key = "optimizer");

}  // namespace dtrain::optim
