// The schedules as closed forms of the training position; see Note [Schedule positions].
#include "dtrain/optim/Scheduler.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"

#include "dtrain/optim/Optimizers.h"

namespace dtrain::optim {

namespace {

// Every schedule, written once; config/ validates optim.scheduler.name against this list.
[[maybe_unused]] const bool kSchedulesRegistered = [] {
  for (const auto& choice : std::vector<config::Choice>{
           {"constant", "the base rate throughout"},
           {"step", "x gamma every step_size epochs (the DDP and Apex ImageNet tutorial: x0.1 every 30)"},
           {"cosine", "cosine decay from lr to final_lr"},
           {"linear", "linear decay from lr to final_lr"},
           {"log", "log-linear decay from lr to final_lr (DiNNO's primal rate)"},
           {"inverse", "lr_k = lr_{k-1} (1 - mu lr_{k-1}), about lr / (1 + mu lr k) (DiNNO's DSGD)"},
       }) {
    config::register_choice(config::kScheduleKey, choice);
  }
  return true;
}();

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

}  // namespace

Scheduler::Scheduler(const config::SchedulerConfig& config, double base_lr)
    : config_(config), base_lr_(base_lr), inverse_{-1, base_lr} {
  const auto& names = config::registered_choices(config::kScheduleKey);
  name_ = names.resolve(config.name).value_or("");
  require(!name_.empty(),
          fmt::format("optim.scheduler.name: expected one of {}, found '{}'; set optim.scheduler.name",
                      names.list(), config.name));
  require(base_lr > 0.0, fmt::format("optim.lr: expected a positive learning rate, found {}", base_lr));
  require(config.warmup_steps >= 0,
          fmt::format("optim.scheduler.warmup_steps: expected >= 0, found {}", config.warmup_steps));
  if (name_ == "step") {
    require(config.step_size > 0,
            fmt::format("optim.scheduler.step_size: expected a positive number of epochs, found {}",
                        config.step_size));
    require(config.gamma > 0.0, fmt::format("optim.scheduler.gamma: expected > 0, found {}", config.gamma));
  }
  if (name_ == "cosine" || name_ == "linear") {
    require(config.final_lr >= 0.0,
            fmt::format("optim.scheduler.final_lr: expected >= 0, found {}", config.final_lr));
  }
  if (name_ == "inverse") {
    require(
        config.mu * base_lr < 1.0,
        fmt::format("optim.scheduler.mu: the inverse decay needs mu * lr < 1 to stay positive, found mu {} "
                    "and lr {}; lower mu",
                    config.mu, base_lr));
  }
  if (name_ == "log") {
    require(config.final_lr > 0.0,
            fmt::format("optim.scheduler.final_lr: log decay interpolates log(lr), so it needs final_lr > 0, "
                        "found {}; set a positive final_lr or use the linear schedule",
                        config.final_lr));
  }
}

double Scheduler::lr(std::int64_t step, std::int64_t epoch, std::int64_t total_steps) const {
  require(step >= 0 && epoch >= 0,
          fmt::format("scheduler: expected step and epoch >= 0, found step {} and epoch {}", step, epoch));
  const std::int64_t warmup = config_.warmup_steps;
  const double warmup_factor =
      step < warmup ? static_cast<double>(step + 1) / static_cast<double>(warmup) : 1.0;

  double value = base_lr_;
  if (name_ == "inverse") {
    value = inverse_decay(step);
  } else if (name_ == "step") {
    value = base_lr_ * std::pow(config_.gamma, static_cast<double>(epoch / config_.step_size));
  } else if (name_ != "constant") {
    require(total_steps > 0, fmt::format("scheduler {}: expected the run's total number of steps, found {}",
                                         name_, total_steps));
    // Progress through the decay: 0 at the first step after warm-up, 1 at the last step.
    const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup - 1));
    const double t = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
    const double final_lr = config_.final_lr;
    if (name_ == "cosine") {
      value = final_lr + (base_lr_ - final_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
    } else if (name_ == "linear") {
      value = base_lr_ + (final_lr - base_lr_) * t;
    } else {
      TORCH_INTERNAL_ASSERT(name_ == "log");
      value = std::exp(std::log(base_lr_) + (std::log(final_lr) - std::log(base_lr_)) * t);
    }
  }
  return value * warmup_factor;
}

// DiNNO's DSGD (optimizers/dsgd.py) decays its step before every round, so step 0 already uses
// lr (1 - mu lr). The recursion has no closed form; the last value is kept so that a run's steps,
// which ask in order, cost one multiplication each.
double Scheduler::inverse_decay(std::int64_t step) const {
  if (step < inverse_.step) inverse_ = {-1, base_lr_};
  while (inverse_.step < step) {
    inverse_.value *= 1.0 - config_.mu * inverse_.value;
    ++inverse_.step;
  }
  return inverse_.value;
}

double Scheduler::apply(torch::optim::Optimizer& optimizer, std::int64_t step, std::int64_t epoch,
                        std::int64_t total_steps) const {
  const double value = lr(step, epoch, total_steps);
  set_learning_rate(optimizer, value);
  return value;
}

}  // namespace dtrain::optim

DTRAIN_LINK_ANCHOR(dtrain_schedules_registry);
