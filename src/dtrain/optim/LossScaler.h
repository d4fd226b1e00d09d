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

namespace dtrain::optim {

// train.precision. Parameters (the master weights) and the optimizer state are float32 in every
// mode; only the forward and backward computation changes.
enum class Precision { Fp32, Bf16, Fp16 };
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

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  std::int64_t clean_steps() const { return clean_steps_; }      // since the last change of scale
  std::int64_t skipped_steps() const { return skipped_steps_; }  // in the whole run

  // Whether any gradient of `parameters` holds an inf or NaN (this rank's view; callers agree
  // over ranks before update()). Parameters without a gradient are skipped.
  static bool found_non_finite(const std::vector<torch::Tensor>& parameters);
  // Ends a step. `overflow` must be the same on every rank: then the step is skipped (returns
  // false), the scale multiplied by backoff_factor and the clean count restarted; otherwise the
  // step goes ahead (returns true) and after growth_interval clean steps in a row the scale is
  // multiplied by growth_factor.
  bool update(bool overflow);

  // The scaler's state by field ("scale", "clean_steps", "skipped_steps") for a checkpoint, and
  // back; load_state throws std::invalid_argument naming a missing or malformed field.
  std::map<std::string, torch::Tensor> state() const;
  void load_state(const std::map<std::string, torch::Tensor>& state);

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t clean_steps_ = 0;
  std::int64_t skipped_steps_ = 0;
};

}  // namespace dtrain::optim
