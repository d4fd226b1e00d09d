// Strategy: how one optimisation step is shared between ranks. The trainer calls train_step()
// the same way whatever the strategy; `local` trains in one process, `data_parallel` all-reduces
// gradients (DataParallel). create_strategy() turns the run configuration into one.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dtrain/comm/CommStats.h"
#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::parallel {

// The model's forward pass: torch::nn::Module has no virtual forward(), so the caller says how to
// run its model, e.g. [m](const torch::Tensor& x) { return m->forward(x); }.
using ForwardFn = std::function<torch::Tensor(const torch::Tensor& inputs)>;
// The loss of a batch, reduced by the mean over its samples (cross-entropy's default): strategies
// that split a batch weight each micro-batch's loss by its share of the samples.
using LossFn = std::function<torch::Tensor(const torch::Tensor& outputs, const torch::Tensor& targets)>;

struct StepResult {
  // Mean loss over the whole step's batch: this rank's batch for `local`, the global batch (mean
  // over ranks) for `data_parallel`. From the last closure evaluation when the optimizer (L-BFGS)
  // evaluates several times.
  double loss = 0.0;
  torch::Tensor outputs;         // detached model outputs for this rank's batch, for training metrics
  std::int64_t samples = 0;      // this rank's samples in the step
  double compute_seconds = 0.0;  // wall time of the step not spent blocked on communication
  double comm_wait_seconds = 0.0;
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // One optimisation step on this rank's batch (batch first in inputs and targets): zero the
  // gradients, forward and backward (in micro-batches when accumulating), communicate, update.
  // The optimizer must own the module's parameters. Works with closure-based optimizers (L-BFGS):
  // the closure holds the forward, backward and communication, so every evaluation is global.
  virtual StepResult train_step(const torch::Tensor& inputs, const torch::Tensor& targets, const LossFn& loss,
                                torch::optim::Optimizer& optimizer) = 0;

  // The full model, for evaluation and checkpoints.
  virtual torch::nn::Module& module() = 0;
  virtual std::shared_ptr<torch::nn::Module> module_ptr() = 0;
  // The model's forward, for evaluation.
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;

  // Communication of this strategy since construction (or the last reset): calls, bytes, waits.
  virtual comm::CommStats comm_stats() const = 0;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

 protected:
  Strategy() = default;
};

// config.strategy: "local" | "data_parallel". `comm` may be null for `local`; `data_parallel`
// needs one (world size 1 is allowed and communicates nothing). Collective for data_parallel.
// Throws std::invalid_argument for an unknown strategy or invalid options.
std::unique_ptr<Strategy> create_strategy(const config::ParallelConfig& config,
                                          std::shared_ptr<torch::nn::Module> module, ForwardFn forward,
                                          comm::CommunicatorPtr comm);

}  // namespace dtrain::parallel
