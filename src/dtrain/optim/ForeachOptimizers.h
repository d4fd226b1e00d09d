// SGD, Adam and AdamW whose step updates every parameter of a group with one multi-tensor
// (at::_foreach_*) operation per arithmetic step instead of one small kernel per tensor: what
// PyTorch's optimizers do with foreach=True, its default on a GPU. A ResNet-50 has 161 parameter
// tensors; per-tensor SGD with momentum launches about 640 kernels a step on a GPU, foreach about 4
// multi-tensor ones. The mathematics and the state (momentum buffers, moments, step counts) are
// LibTorch's own, kept in LibTorch's per-parameter state, so a checkpoint saved by one loads into
// the other and both give the same numbers (equal within rounding on the CPU, where the foreach
// ops run tensor by tensor). Given fp16's overflow flag or a learning rate on the device, they
// step through LibTorch's fused kernels instead (FusedStep), equal within rounding again.
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <map>
#include <optional>
#include <vector>

namespace dtrain::optim {

// An optimizer with LibTorch's one-kernel step (optim/FusedKernels.h): ForeachSGD, ForeachAdam and
// ForeachAdamW. The fused step can skip itself on a flag that stays on the device (fp16's overflow)
// and read the learning rate from the device (a CUDA graph's replays).
class FusedStep {
 public:
  virtual ~FusedStep() = default;
  // The step, leaving parameters and state untouched where `found_inf` (float32, one element, on
  // the parameters' device) is 1, with nothing read on the host. Returns false, having done nothing,
  // where it cannot (see each optimizer); the caller then reads the flag and calls step().
  virtual bool step_unless(const torch::Tensor& found_inf) = 0;
  // From now on the fused steps (step() too) take the learning rate from `lr` (float32, one element,
  // on the parameters' device) rather than the options, so that a CUDA graph replaying the step uses
  // the rate written into `lr` before each replay (train/CudaGraphStep.h). Needs
  // DTRAIN_HAS_FUSED_TENSOR_LR; throws otherwise.
  void set_lr_tensor(torch::Tensor lr);

 protected:
  torch::Tensor lr_tensor_;
};

class ForeachSGD : public torch::optim::SGD, public FusedStep {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // One fused kernel per group (at::_fused_sgd_). Cannot: a LibTorch without the kernel for the
  // parameters' device, or a parameter's first step (its momentum buffer starts from the gradient
  // on the host's word).
  bool step_unless(const torch::Tensor& found_inf) override;

 private:
  // One fused kernel per group, skipping where `found_inf` is 1; false, having done nothing, when
  // a parameter has no momentum buffer yet or the kernel does not run on the parameters' device.
  bool fused_step(const std::optional<torch::Tensor>& found_inf);
};

// Adam's step counts on the device, which the fused kernels read there and which only the device
// knows once a step may have been skipped there; see Note [Step counts on the device].
class DeviceStepCounts {
 public:
  // The counts of `params`, float32 and 0-dimensional on their device, made from `host` (LibTorch's
  // counts, in the same order) for a parameter that has none yet.
  std::vector<torch::Tensor> of(const std::vector<torch::Tensor>& params,
                                const std::vector<std::int64_t>& host);
  // Where fused steps have changed them since the last call (always, once replayed by a graph,
  // which changes them unseen): the counts by parameter, read in one copy; empty otherwise.
  std::map<const c10::TensorImpl*, std::int64_t> take_changes();
  void mark_changed() { changed_ = true; }
  void mark_replayed() { replayed_ = true; }
  // Forgets them (after a host step or a load, LibTorch's counts are the true ones).
  void clear();

 private:
  std::map<const c10::TensorImpl*, torch::Tensor> counts_;
  bool changed_ = false;
  bool replayed_ = false;
};

// Adam (kDecoupled false: its weight decay an L2 term of the gradient) and AdamW (true: the
// weights shrink apart from the moments), as ForeachAdam and ForeachAdamW below.
template <class Base, class ParamState, class Options, bool kDecoupled>
class ForeachAdamLike : public Base, public FusedStep {
 public:
  using Base::Base;
  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override;
  // One fused kernel per group (at::_fused_adam_, at::_fused_adamw_), counting steps on the
  // device. Cannot: a LibTorch without the kernel for the parameters' device.
  bool step_unless(const torch::Tensor& found_inf) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
  // Copies the device's step counts into LibTorch's per-parameter state, where fused steps have
  // changed them; dtrain's own checkpoint code calls it before reading state().
  void settle_step_counts() const;
  void forget_step_counts() { device_steps_.clear(); }

 private:
  mutable DeviceStepCounts device_steps_;
};

using ForeachAdam =
    ForeachAdamLike<torch::optim::Adam, torch::optim::AdamParamState, torch::optim::AdamOptions, false>;
using ForeachAdamW =
    ForeachAdamLike<torch::optim::AdamW, torch::optim::AdamWParamState, torch::optim::AdamWOptions, true>;
extern template class ForeachAdamLike<torch::optim::Adam, torch::optim::AdamParamState,
                                      torch::optim::AdamOptions, false>;
extern template class ForeachAdamLike<torch::optim::AdamW, torch::optim::AdamWParamState,
                                      torch::optim::AdamWOptions, true>;

// settle_step_counts() / forget_step_counts() of `optimizer` where it is ForeachAdam or ForeachAdamW;
// nothing otherwise.
void settle_step_counts(const torch::optim::Optimizer& optimizer);
void forget_step_counts(torch::optim::Optimizer& optimizer);

}  // namespace dtrain::optim
