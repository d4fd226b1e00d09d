// The `data_parallel` strategy (dSGD, DDP, Horovod): every rank holds the whole model, computes
// gradients on its slice of the global batch, and DataParallel averages them during backward.
#pragma once

#include "dtrain/parallel/DataParallel.h"
#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel {

struct DataParallelStrategyOptions {
  DataParallelOptions data_parallel;
  // Micro-batches per step: the first k-1 backwards accumulate locally, the last all-reduces.
  int accumulation_steps = 1;
  // Broadcast rank 0's buffers (BatchNorm statistics) before every step, as DDP's
  // broadcast_buffers does; costs nothing for models without buffers.
  bool broadcast_buffers = true;
};

class DataParallelStrategy final : public Strategy {
 public:
  // Collective: broadcasts rank 0's weights (see DataParallel).
  DataParallelStrategy(std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
                       comm::CommunicatorPtr comm, DataParallelStrategyOptions options = {});

  // Each rank passes its own slice of the global batch; all ranks must use the same number of
  // micro-batches. The reported loss is the mean over ranks (one extra 4-byte all-reduce).
  StepResult train_step(const torch::Tensor& inputs, const torch::Tensor& targets, const LossFn& loss,
                        torch::optim::Optimizer& optimizer) override;
  torch::nn::Module& module() override { return dp_.module(); }
  std::shared_ptr<torch::nn::Module> module_ptr() override { return dp_.module_ptr(); }
  torch::Tensor forward(const torch::Tensor& inputs) override { return forward_(inputs); }
  comm::CommStats comm_stats() const override { return comm_->stats(); }
  std::string name() const override { return "data_parallel"; }
  int rank() const override { return comm_->rank(); }
  int world_size() const override { return comm_->size(); }

  DataParallel& data_parallel() { return dp_; }

 private:
  comm::CommunicatorPtr comm_;
  ForwardFn forward_;
  DataParallelStrategyOptions options_;
  DataParallel dp_;
};

}  // namespace dtrain::parallel
