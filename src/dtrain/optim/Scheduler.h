// Learning-rate schedules (constant, step, cosine, linear, log) with an optional linear warm-up.
// The rate is a pure function of the training position (step, epoch, total steps), so a resumed
// run gets exactly the rates it would have had, and every rank computes the same value.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"

namespace dtrain::optim {

// Note [Schedule positions]
// `step` counts optimizer steps from 0 over the whole run; `epoch` counts from 0; total_steps is
// the number of steps the run will take. Warm-up: steps 0 .. warmup_steps-1 use
// lr * (step + 1) / warmup_steps, so the first step already moves and the last warm-up step uses
// lr. The decays (cosine, linear, log) then run from lr at step warmup_steps to final_lr at the
// last step, total_steps - 1, like numpy's linspace/logspace between the two rates (DiNNO);
// later steps stay at final_lr. step: lr * gamma^floor(epoch / step_size) (the DDP and Apex tutorial: x0.1
// every 30 epochs). inverse: lr_{k} = lr_{k-1} (1 - mu lr_{k-1}) with lr_{-1} = lr, so step 0 already
// decays (DiNNO's DSGD step size).
class Scheduler {
 public:
  // Throws std::invalid_argument for an unknown name or impossible values (log decay needs both
  // rates positive).
  Scheduler(const config::SchedulerConfig& config, double base_lr);

  // See Note [Schedule positions]. total_steps is read by cosine, linear and log only.
  double lr(std::int64_t step, std::int64_t epoch, std::int64_t total_steps) const;
  // Sets lr(step, epoch, total_steps) on every param group and returns it.
  double apply(torch::optim::Optimizer& optimizer, std::int64_t step, std::int64_t epoch,
               std::int64_t total_steps) const;

  const std::string& name() const { return name_; }
  double base_lr() const { return base_lr_; }

 private:
  double inverse_decay(std::int64_t step) const;

  config::SchedulerConfig config_;
  std::string name_;
  double base_lr_;
  struct InverseCache {
    std::int64_t step;
    double value;
  };
  mutable InverseCache inverse_;  // the last value of inverse_decay
};

}  // namespace dtrain::optim
