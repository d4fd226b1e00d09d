// train.cuda_graph: the training step captured once in a CUDA graph and replayed, as CUDA-graphed
// trainers (MLPerf's, PyTorch's torch.cuda.graph whole-network capture) do.
//
// Note [Capturing the step in a CUDA graph]
// A step on a GPU is hundreds of kernel launches; where each kernel is short (resnet18 at batch
// 32), the CPU's launching is the step's time. A CUDA graph records the launches once and replays
// them with one call. What the step needs for that, and how it gets it:
//   - static addresses: the batch is copied into input and target tensors made once; parameters,
//     gradients, momentum buffers and the loss scaler's state keep their storage for the run;
//     activations come from the graph's private memory pool;
//   - nothing read on the host inside the step: the loss, metrics and fp16's skip stay on the device
//     (Note [Reading a step's figures], Note [A loss scaler on the device]); the update is the
//     optimizer's fused kernel (SGD, Adam, AdamW), taking the learning rate from a one-element
//     tensor written before each replay, so a schedule reaches every replay, and fp16's overflow
//     flag, so a skip needs no read; Adam counts its steps on the device (Note [Step counts on the
//     device] in optim/ForeachOptimizers.cpp);
//   - warm-up: the first kWarmupSteps steps run eagerly on the stream the capture uses, so that
//     cuDNN's autotuner, cuBLAS's workspace and the optimizer's state are settled before capture;
//     the autocast cast cache is off while capturing (its casts are recorded as kernels instead).
// A batch of another shape (an epoch's last, smaller batch) runs eagerly on the same parameters
// and optimizer. The step's figures are the same as an eager step's; its phases (forward,
// backward, update) cannot be told apart inside one replay, so the step's time is reported whole.
// What cannot be captured is refused before the run starts (check_cuda_graph).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Batch.h"
#include "dtrain/parallel/Strategy.h"

namespace dtrain::train {

// Why this build of dtrain cannot capture a step (a LibTorch without CUDA, or one without the
// fused optimizer steps that take their rate as a tensor), or nothing when it can.
std::optional<std::string> cuda_graph_unavailable();

// Refuses, with one line naming the setting, a train.cuda_graph: true that cannot hold: not on a
// GPU, a strategy that does not declare capabilities.cuda_graph where it registers (only local
// does), lbfgs, optim.foreach: false, fp16 agreed over several workers, or this build (above).
// Does nothing for train.cuda_graph: false.
void check_cuda_graph(const config::RunConfig& config, int world_size);

class CudaGraphStep {
 public:
  static constexpr int kWarmupSteps = 3;

  // `strategy` is the run's (local) strategy; check_cuda_graph() has passed.
  explicit CudaGraphStep(parallel::Strategy& strategy);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // The step on `batch` at learning rate `lr`: eager during warm-up and for a batch of another
  // shape, captured on the first step after warm-up, replayed after that.
  parallel::StepResult step(const data::Batch& batch, double lr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::train
