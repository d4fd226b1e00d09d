// SGD, Adam and AdamW whose step updates every parameter of a group with one multi-tensor
// (at::_foreach_*) operation per arithmetic step instead of one small kernel per tensor: what
// PyTorch's optimizers do with foreach=True, its default on a GPU. A ResNet-50 has 161 parameter
// tensors; per-tensor SGD with momentum launches about 640 kernels a step on a GPU, foreach about 4
// multi-tensor ones. The mathematics and the state (momentum buffers, moments, step counts) are
// LibTorch's own, kept in LibTorch's per-parameter state, so a checkpoint saved by one loads into
// the other and both give the same numbers (equal within rounding on the CPU, where the foreach
// ops run tensor by tensor).
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <optional>
#include <vector>

namespace dtrain::optim {

class ForeachSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // The step as one fused kernel per group (at::_fused_sgd_) that leaves parameters and momentum
  // untouched where `found_inf` (float32, one element, on the parameters' device) is 1: fp16's
  // overflow skip decided on the device. Returns false, having done nothing, where it cannot: a
  // LibTorch without the kernel (DTRAIN_HAS_FUSED_SGD), parameters off the GPU, or a parameter's
  // first step (its momentum buffer starts from the gradient on the host's word); the caller then
  // reads the flag and calls step().
  bool step_unless(const torch::Tensor& found_inf);
  // From now on the fused steps (step() too, once every parameter has its momentum buffer) take
  // the learning rate from `lr` (float32, one element, on the parameters' device) rather than the
  // options, so that a CUDA graph replaying the step uses the rate written into `lr` before each
  // replay (train/CudaGraphStep.h). Needs DTRAIN_HAS_FUSED_SGD_TENSOR_LR; throws otherwise.
  void set_lr_tensor(torch::Tensor lr);

 private:
  // One fused kernel per group, skipping where `found_inf` is 1; false, having done nothing, when
  // a parameter has no momentum buffer yet.
  bool fused_step(const std::optional<torch::Tensor>& found_inf);

  torch::Tensor lr_tensor_;
};

class ForeachAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

class ForeachAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace dtrain::optim
