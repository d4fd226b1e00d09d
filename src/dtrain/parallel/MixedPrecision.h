// train.precision inside a strategy's step: the forward pass under bf16 autocast or fp16 numerics,
// fp16's loss scale, and after backward (and the strategy's gradient communication) the overflow
// check every rank agrees on, the unscaling, and whether the step is taken. Every strategy uses
// one; parameters and optimizer state stay float32 (the master weights) in every mode.
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/LossScaler.h"
#include "dtrain/util/DeviceScalar.h"

namespace torch::optim {
class Optimizer;
}

namespace dtrain::parallel {

// Note [fp16 numerics]
// LibTorch 1.13 cannot compute in float16 on the CPU: addmm, slow_conv2d, max_pool2d, clamp_min
// (ReLU) and log_softmax have no Half kernel there ("not implemented for 'Half'"), and CPU autocast
// refuses any dtype but bfloat16. So train.precision: fp16 reproduces fp16's *numbers*, computed
// by float32 kernels, as Apex's O2 lays them out:
//   - the weights the forward pass sees are the float32 master weights rounded to float16
//     (HalfWeights; the master values come back before the update);
//   - the input of every stage of the network (models::Network::stages(), e.g. each conv, ReLU,
//     pool and Linear of lenet5; a whole block of a ResNet) and the network's output are rounded
//     to float16 on the way forward, and the gradient flowing back through each of those points
//     is rounded to float16 on the way back (x.to(kHalf).to(kFloat) is differentiable, and its
//     backward rounds the gradient the same way);
//   - the parameters' gradients are rounded to float16 once the strategy's communication is done.
// Values above 65504 become inf and values below 2^-24 vanish, exactly where fp16 hardware would
// overflow or underflow at those points, so the dynamic loss scale does the work it does on a
// GPU. What differs: the products and sums inside one kernel accumulate in float32 (fp16 tensor
// cores accumulate in float32 too), values inside one stage (a ResNet block) are not rounded
// between its ops, and nothing is faster or smaller: this mode is for studying fp16's numerics
// and the loss scaler, not for speed. bf16 is real CPU autocast (optim/Autocast.h). On a GPU, fp16
// is real: autocast to float16 (torch.amp's, Apex O1/O2's arithmetic), float32 master weights and
// gradients, the overflow check one multi-tensor kernel; none of the rounding above is done there.

class MixedPrecision {
 public:
  // `comm` (may be null) is what the ranks agree on a skipped step over.
  MixedPrecision(optim::Precision precision, comm::CommunicatorPtr comm,
                 optim::LossScalerOptions scaler = {});

  optim::Precision precision() const { return precision_; }
  bool scaling() const { return scaler_.has_value(); }

  // network.forward(inputs) under this precision; floating outputs come back as float32, so the
  // loss is computed in float32.
  torch::Tensor forward(models::Network& network, const torch::Tensor& inputs) const;
  // What the loss is multiplied by before backward: the scaler's scale for fp16 (a float32 tensor
  // on the state's device, Note [A loss scaler on the device]), undefined (1) otherwise.
  torch::Tensor loss_scale_tensor() const;
  // The scale read on the host (1 without scaling); a device read on a GPU.
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  // The scale after the last step as a step's figure, read when logged: 0 without scaling.
  util::DeviceScalar loss_scale_figure() const;

  // RAII for fp16: `parameters` hold their float16-rounded values while it lives (the forward and
  // backward of a step), their float32 master values again after. Does nothing in other modes.
  class HalfWeights {
   public:
    HalfWeights(std::vector<torch::Tensor> parameters, bool active);
    ~HalfWeights();
    HalfWeights(const HalfWeights&) = delete;
    HalfWeights& operator=(const HalfWeights&) = delete;

   private:
    std::vector<torch::Tensor> parameters_, masters_;
  };
  std::unique_ptr<HalfWeights> half_weights(const std::vector<torch::Tensor>& parameters) const;

  // After backward and the strategy's own gradient communication, without reading anything on the
  // host: rounds the gradients to fp16 (the CPU's emulation), checks them for inf and NaN while
  // dividing them by the scale, all-reduces the overflow flag (collective when scaling: every rank
  // calls it at the same point, so one rank's overflow skips the step everywhere; the wait is added
  // to *communication_seconds) and updates the scale. Nothing without scaling.
  void finish_gradients_on_device(const std::vector<torch::Tensor>& parameters,
                                  double* communication_seconds);
  // The optimizer's step after finish_gradients_on_device(), unless it overflowed: decided on the
  // device by an optimizer that takes the flag (optim::ForeachSGD's fused step), by one read of the
  // flag otherwise (free on the CPU; GradScaler reads it too for an optimizer that is not fused).
  void step(torch::optim::Optimizer& optimizer) const;
  // finish_gradients_on_device() and a read of the flag: whether the optimizer should step (true
  // without scaling), for strategies that update with their own code.
  bool finish_gradients(const std::vector<torch::Tensor>& parameters, double* communication_seconds);
  // Whether the last step was skipped (0 or 1), read when logged.
  util::DeviceScalar last_skipped() const { return last_skipped_; }

  // The same in parts, decided on the host, for a strategy whose nodes step one after another.
  // check_gradients: rounds the gradients to fp16 and says whether any is inf or NaN on this rank
  // (false without scaling). agree: collective when scaling: one all-reduce (a sum) of the overflow
  // flags; updates the scale and returns whether the optimizer should step (true without scaling,
  // with no communication). unscale: divides the gradients by the scale they were computed with.
  bool check_gradients(const std::vector<torch::Tensor>& parameters);
  bool agree(bool local_overflow, double* communication_seconds);
  void unscale(const std::vector<torch::Tensor>& parameters, double scale) const;

  // The scaler's state under "strategy/loss_scaler/<field>" (see Note [Checkpoint layout]); a
  // checkpoint without it (saved in fp32 or bf16) leaves the initial scale.
  void save(io::Checkpoint& checkpoint) const;
  void load(const io::Checkpoint& checkpoint);
  const optim::LossScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }

 private:
  // Whether the parameters live on a GPU, where fp16 is real (autocast to float16) rather than the
  // CPU's emulation.
  static bool on_gpu(const std::vector<torch::Tensor>& parameters);

  // The gradients of `parameters` that are defined, rounded to fp16 on the CPU (Note [fp16
  // numerics]), with the scaler's state moved to their device.
  std::vector<torch::Tensor> gradients_to_check(const std::vector<torch::Tensor>& parameters);

  optim::Precision precision_;
  comm::CommunicatorPtr comm_;
  std::optional<optim::LossScaler> scaler_;
  util::DeviceScalar last_skipped_ = 0.0;
};

// A tensor's values rounded to float16 and back to its dtype, differentiably: the gradient that
// flows back through it is rounded the same way. Non-floating tensors (token ids) pass unchanged.
torch::Tensor round_through_half(const torch::Tensor& tensor);

// Refuses, with a one-line std::invalid_argument, an optimizer the precision cannot honour:
// fp16's loss scaler decides after backward whether to step, which an optimizer that runs its own
// closure several times per step (lbfgs) does not allow (PyTorch's GradScaler refuses closures too).
void check_precision_optimizer(optim::Precision precision, const torch::optim::Optimizer& optimizer);

// Refuses, before anything trains, a model one of whose stages cannot compute in `precision` where
// its parameters live (an op with no bfloat16 kernel on the CPU, e.g. LibTorch 1.13's mish or
// fractional max-pooling): runs the stages once, in training mode without a graph, on two samples
// shaped like `input`, under the precision's autocast, and throws a one-line std::invalid_argument
// naming train.precision, the stage, its module and the op's own message. The model's buffers and
// the random generators are as before. Nothing to run for fp32, or for fp16 on the CPU (float32
// kernels, Note [fp16 numerics]).
void check_precision_runs(optim::Precision precision, models::Network& network,
                          const models::InputSpec& input);

}  // namespace dtrain::parallel
