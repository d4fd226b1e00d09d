// The `local` strategy: one process, no communication; the baseline every distributed strategy
// must reproduce. Supports gradient accumulation over micro-batches like data_parallel.
#pragma once

#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel {

struct LocalOptions {
  int accumulation_steps = 1;  // micro-batches per step; the gradient equals the whole batch's
};

class LocalStrategy final : public Strategy {
 public:
  // `comm` is optional and only reports rank and size (each rank then trains on its own).
  LocalStrategy(std::shared_ptr<torch::nn::Module> module, ForwardFn forward, LocalOptions options = {},
                comm::CommunicatorPtr comm = nullptr);

  StepResult train_step(const torch::Tensor& inputs, const torch::Tensor& targets, const LossFn& loss,
                        torch::optim::Optimizer& optimizer) override;
  torch::nn::Module& module() override { return *module_; }
  std::shared_ptr<torch::nn::Module> module_ptr() override { return module_; }
  torch::Tensor forward(const torch::Tensor& inputs) override { return forward_(inputs); }
  comm::CommStats comm_stats() const override { return {}; }
  std::string name() const override { return "local"; }
  int rank() const override;
  int world_size() const override;

 private:
  std::shared_ptr<torch::nn::Module> module_;
  ForwardFn forward_;
  LocalOptions options_;
  comm::CommunicatorPtr comm_;
};

}  // namespace dtrain::parallel
