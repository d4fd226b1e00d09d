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

#include <vector>

namespace dtrain::optim {

class ForeachSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
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
