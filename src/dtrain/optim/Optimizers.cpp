// create_optimizer() and the learning-rate and state helpers around torch::optim.
#include "dtrain/optim/Optimizers.h"

#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/sgd.h>

#include <stdexcept>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/optim/ForeachOptimizers.h"

namespace dtrain::optim {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

void validate_common(const config::OptimConfig& config, const std::string& name) {
  require(
      config.lr > 0.0,
      fmt::format("optim.lr: expected a positive learning rate, found {}; e.g. optim.lr: 0.01", config.lr));
  require(config.weight_decay >= 0.0,
          fmt::format("optim.weight_decay: expected >= 0, found {}", config.weight_decay));
  if (name != "sgd") {
    require(config.momentum == 0.0 && !config.nesterov,
            fmt::format(
                "optim.momentum/optim.nesterov apply to sgd only, found momentum {} and nesterov {} "
                "with {}; remove them (on the command line: optim.momentum=null optim.nesterov=null) or set "
                "optim.name: sgd (adam's momentum is optim.beta1)",
                config.momentum, config.nesterov, name));
  }
  require(
      name != "lbfgs" || config.foreach != config::AutoBool::True,
      "optim.foreach: true applies to sgd, adam and adamw; lbfgs updates one tensor at a time; remove it or "
      "set optim.foreach: auto");
  if (name != "lbfgs") {
    require(config.lbfgs_line_search == config::LineSearch::None,
            fmt::format("optim.lbfgs_line_search: applies to lbfgs only, found {} with {}; remove it or set "
                        "optim.name: lbfgs",
                        config::kLineSearchNames.name(config.lbfgs_line_search), name));
  }
  if (name == "adam" || name == "adamw") {
    require(config.beta1 >= 0.0 && config.beta1 < 1.0 && config.beta2 >= 0.0 && config.beta2 < 1.0,
            fmt::format("optim.beta1/optim.beta2: expected both in [0, 1), found {} and {}", config.beta1,
                        config.beta2));
    require(config.eps > 0.0, fmt::format("optim.eps: expected > 0, found {}", config.eps));
  }
}

using Parameters = std::vector<torch::Tensor>;

// optim.foreach: auto chooses the multi-tensor update where it pays, for parameters on a GPU (one
// kernel launch per operation instead of one per tensor); on the CPU the per-tensor update is what
// the foreach ops run anyway.
bool use_foreach(const Parameters& parameters, const config::OptimConfig& config) {
  if (config.foreach != config::AutoBool::Auto) return config.foreach == config::AutoBool::True;
  return !parameters.empty() && parameters.front().is_cuda();
}
using Builder = std::unique_ptr<torch::optim::Optimizer> (*)(Parameters, const config::OptimConfig&);

std::unique_ptr<torch::optim::Optimizer> build_sgd(Parameters parameters, const config::OptimConfig& config) {
  require(config.momentum >= 0.0, fmt::format("optim.momentum: expected >= 0, found {}", config.momentum));
  require(!config.nesterov || config.momentum > 0.0,
          "optim.nesterov: expected optim.momentum > 0 with nesterov, found momentum 0; set optim.momentum "
          "(e.g. 0.9) or optim.nesterov: false");
  auto options = torch::optim::SGDOptions(config.lr)
                     .momentum(config.momentum)
                     .nesterov(config.nesterov)
                     .weight_decay(config.weight_decay);
  if (use_foreach(parameters, config)) return std::make_unique<ForeachSGD>(std::move(parameters), options);
  return std::make_unique<torch::optim::SGD>(std::move(parameters), options);
}

std::unique_ptr<torch::optim::Optimizer> build_adam(Parameters parameters,
                                                    const config::OptimConfig& config) {
  auto options = torch::optim::AdamOptions(config.lr)
                     .betas({config.beta1, config.beta2})
                     .eps(config.eps)
                     .weight_decay(config.weight_decay);
  if (use_foreach(parameters, config)) return std::make_unique<ForeachAdam>(std::move(parameters), options);
  return std::make_unique<torch::optim::Adam>(std::move(parameters), options);
}

std::unique_ptr<torch::optim::Optimizer> build_adamw(Parameters parameters,
                                                     const config::OptimConfig& config) {
  auto options = torch::optim::AdamWOptions(config.lr)
                     .betas({config.beta1, config.beta2})
                     .eps(config.eps)
                     .weight_decay(config.weight_decay);
  if (use_foreach(parameters, config)) return std::make_unique<ForeachAdamW>(std::move(parameters), options);
  return std::make_unique<torch::optim::AdamW>(std::move(parameters), options);
}

std::unique_ptr<torch::optim::Optimizer> build_lbfgs(Parameters parameters,
                                                     const config::OptimConfig& config) {
  require(
      config.weight_decay == 0.0,
      fmt::format("optim.weight_decay: lbfgs has no weight decay, found {}; set optim.weight_decay: 0 or add "
                  "an L2 term to the loss",
                  config.weight_decay));
  require(config.lbfgs_history > 0 && config.lbfgs_max_iter > 0,
          fmt::format("optim.lbfgs_history/optim.lbfgs_max_iter: expected both > 0, found {} and {}",
                      config.lbfgs_history, config.lbfgs_max_iter));
  auto options = torch::optim::LBFGSOptions(config.lr)
                     .history_size(config.lbfgs_history)
                     .max_iter(config.lbfgs_max_iter);
  // Without a line search every iteration takes a step of lr along the direction; strong Wolfe
  // evaluates the closure until the step satisfies both Wolfe conditions (Nocedal & Wright, alg.
  // 3.5/3.6, as PyTorch implements it).
  if (config.lbfgs_line_search == config::LineSearch::StrongWolfe) options.line_search_fn("strong_wolfe");
  return std::make_unique<torch::optim::LBFGS>(std::move(parameters), options);
}

struct OptimizerEntry {
  config::Choice choice;
  Builder build;
};

// Every optimizer, written once; config/ validates optim.name against this list.
const std::vector<OptimizerEntry>& optimizer_table() {
  static const std::vector<OptimizerEntry> table{
      {{"sgd", "stochastic gradient descent; optim.momentum, nesterov, weight_decay"}, build_sgd},
      {{"adam", "Adam; optim.beta1, beta2, eps, weight_decay (L2)"}, build_adam},
      {{"adamw", "AdamW; decoupled optim.weight_decay"}, build_adamw},
      {{"lbfgs",
        "L-BFGS; optim.lbfgs_history, lbfgs_max_iter, lbfgs_line_search (none | strong_wolfe); evaluates the "
        "step's closure several times"},
       build_lbfgs},
  };
  return table;
}

[[maybe_unused]] const bool kOptimizersRegistered = [] {
  for (const auto& entry : optimizer_table()) config::register_choice(config::kOptimizerKey, entry.choice);
  return true;
}();

}  // namespace

std::unique_ptr<torch::optim::Optimizer> create_optimizer(std::vector<torch::Tensor> parameters,
                                                          const config::OptimConfig& config) {
  const auto& names = config::registered_choices(config::kOptimizerKey);
  const auto name = names.resolve(config.name);
  if (!name) {
    throw std::invalid_argument(
        fmt::format("optim.name: expected one of {}, found '{}'; set optim.name", names.list(), config.name));
  }
  validate_common(config, *name);
  for (const auto& entry : optimizer_table()) {
    if (entry.choice.name == *name) return entry.build(std::move(parameters), config);
  }
  TORCH_INTERNAL_ASSERT(false, "optimizer '", *name, "' is registered without a builder");
}

OptimizerFactory optimizer_factory(const config::OptimConfig& config) {
  // A configuration the optimizer refuses fails here, not when a strategy first builds it.
  create_optimizer({torch::zeros({1}).requires_grad_()}, config);
  return [config](std::vector<torch::Tensor> parameters) {
    return create_optimizer(std::move(parameters), config);
  };
}

double learning_rate(const torch::optim::Optimizer& optimizer) {
  TORCH_INTERNAL_ASSERT(!optimizer.param_groups().empty());
  return optimizer.param_groups().front().options().get_lr();
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

void save_optimizer_state(const torch::optim::Optimizer& optimizer, torch::serialize::OutputArchive& archive,
                          const std::string& key) {
  torch::serialize::OutputArchive state;
  optimizer.save(state);
  archive.write(key, state);
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive,
                          const std::string& key) {
  torch::serialize::InputArchive state;
  if (!archive.try_read(key, state)) {
    throw std::invalid_argument(fmt::format(
        "checkpoint: expected optimizer state under '{}', found none; the checkpoint was saved without an "
        "optimizer or under another key",
        key));
  }
  optimizer.load(state);
}

}  // namespace dtrain::optim

DTRAIN_LINK_ANCHOR(dtrain_optimizers_registry);
