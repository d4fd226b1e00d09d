// Mixed precision's names and the dynamic loss scaler (PyTorch's GradScaler, Apex's dynamic loss
// scale): the loss is multiplied by a scale before backward so that small gradients survive fp16's
// range, the gradients are divided by it again before the update, and a step whose gradients hold
// an inf or NaN is skipped while the scale backs off.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"

namespace dtrain::optim {

// train.precision, the configuration's own enum (its names are config::kPrecisionNames).
// Parameters (the master weights) and the optimizer state are float32 in every mode; only the
// forward and backward computation changes.
using Precision = config::Precision;
std::string to_string(Precision precision);
// "fp32", "bf16", "fp16"; throws std::invalid_argument listing them otherwise.
Precision parse_precision(const std::string& name);

// PyTorch's torch.cuda.amp.GradScaler defaults (REFERENCES.md, "Mixed precision").
struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // after growth_interval clean steps in a row
  double backoff_factor = 0.5;  // on a step with inf/NaN gradients, which is skipped
  std::int64_t growth_interval = 2000;
};

// Note [A loss scaler on the device]
// The scaler's state is tensors on the gradients' device, as GradScaler keeps it: the scale
// (float32), the clean steps since its last change (int32, GradScaler's growth tracker), the
// skipped steps of the run (int64) and the step's overflow flag (float32, positive when some
// gradient held an inf or NaN). A step runs check, agreement and update without reading any of
// them on the host: on a GPU (and on the CPU of a LibTorch that has them there, 2.x) the check is
// one multi-tensor kernel that also unscales (at::_amp_foreach_non_finite_check_and_unscale_) and
// the update is GradScaler's own kernel (at::_amp_update_scale_); on the CPU of LibTorch 1.13,
// which has neither, the same arithmetic is done with ordinary tensor operations. Ranks agree by all-reducing
// the flag (a sum) before update(), so every rank skips alike. The host reads the figures only when they are
// logged or saved (scale(), clean_steps(), skipped_steps()); whether the optimizer steps is decided on the
// device where the optimizer can (the fused SGD, Adam and AdamW kernels take the flag:
// optim::FusedStep) and by reading the flag otherwise, which is free on the CPU. With the default factors
// (2 and 1/2) every scale is a power of two, so multiplying by its reciprocal unscales exactly as dividing
// would.
class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  // Moves the state to `device` (a no-op when it is there): the gradients' device, once known.
  void to(const torch::Device& device);
  torch::Device device() const { return scale_.device(); }

  // The scale as a float32 tensor of one element on the state's device: what the loss is
  // multiplied by before backward.
  const torch::Tensor& scale_tensor() const { return scale_; }
  // The step's overflow flag (float32, one element): positive when a checked gradient held an inf
  // or NaN. Callers all-reduce it (a sum) between check and update.
  torch::Tensor& found_inf() { return found_inf_; }
  const torch::Tensor& found_inf() const { return found_inf_; }

  // Host reads of the state (each waits for the device on a GPU).
  double scale() const;
  std::int64_t clean_steps() const;    // since the last change of scale
  std::int64_t skipped_steps() const;  // in the whole run

  // Starts a step's check: clears the flag.
  void clear_found_inf();
  // Adds to the flag whether any of `grads` holds an inf or NaN; with `unscale`, also multiplies
  // them by the reciprocal of the scale (the scale they were computed with). Reads nothing.
  void check(const std::vector<torch::Tensor>& grads, bool unscale);
  // Ends a step on the device from the (agreed) flag: on an overflow the scale is multiplied by
  // backoff_factor, the clean count restarts and the skipped count grows; otherwise after
  // growth_interval clean steps in a row the scale is multiplied by growth_factor (if that stays
  // finite). Reads nothing.
  void update();
  // Host form of a step, for callers that decide on the host: sets the flag to `overflow` (the same
  // on every rank), updates, and returns whether the step goes ahead.
  bool update(bool overflow);

  // The scaler's state by field ("scale" float64, "clean_steps" and "skipped_steps" int64) for a
  // checkpoint, and back; load_state throws std::invalid_argument naming a missing or malformed field.
  std::map<std::string, torch::Tensor> state() const;
  void load_state(const std::map<std::string, torch::Tensor>& state);

 private:
  LossScalerOptions options_;
  torch::Tensor scale_, growth_tracker_, skipped_, found_inf_;
};

}  // namespace dtrain::optim
