// See LossScaler.h. The state machine is GradScaler's (torch/amp/grad_scaler.py, _amp_update_scale):
// the one difference is that the scale lives in a double on the host, as there is no device to keep
// it on, and the skip decision arrives already agreed over ranks.
#include "dtrain/optim/LossScaler.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "dtrain/util/EnumNames.h"

namespace dtrain::optim {
namespace {

constexpr util::EnumNames<Precision, 3> kPrecisionNames{
    {{{Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Fp16, "fp16"}}}};

torch::Tensor field(const std::map<std::string, torch::Tensor>& state, const std::string& name) {
  const auto it = state.find(name);
  if (it == state.end() || !it->second.defined() || it->second.numel() != 1) {
    throw std::invalid_argument(
        fmt::format("loss scaler state: field '{}' is missing or not a single value", name));
  }
  return it->second;
}

}  // namespace

std::string to_string(Precision precision) {
  return kPrecisionNames.name(precision);
}

Precision parse_precision(const std::string& name) {
  return kPrecisionNames.parse(name, "precision");
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options_.init_scale > 0.0) || !(options_.growth_factor > 1.0) || !(options_.backoff_factor > 0.0) ||
      !(options_.backoff_factor < 1.0) || options_.growth_interval < 1) {
    throw std::invalid_argument(fmt::format(
        "loss scaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= "
        "1; got {}, {}, {}, {}",
        options_.init_scale, options_.growth_factor, options_.backoff_factor, options_.growth_interval));
  }
}

bool LossScaler::found_non_finite(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  for (const auto& p : parameters) {
    const auto& grad = p.grad();
    if (!grad.defined()) continue;
    if (!torch::isfinite(grad).all().item<bool>()) return true;
  }
  return false;
}

bool LossScaler::update(bool overflow) {
  if (overflow) {
    scale_ *= options_.backoff_factor;
    clean_steps_ = 0;
    ++skipped_steps_;
    return false;
  }
  if (++clean_steps_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    clean_steps_ = 0;
  }
  return true;
}

std::map<std::string, torch::Tensor> LossScaler::state() const {
  return {{"scale", torch::tensor({scale_}, torch::kDouble)},
          {"clean_steps", torch::tensor({clean_steps_}, torch::kLong)},
          {"skipped_steps", torch::tensor({skipped_steps_}, torch::kLong)}};
}

void LossScaler::load_state(const std::map<std::string, torch::Tensor>& state) {
  const double scale = field(state, "scale").item<double>();
  const auto clean = field(state, "clean_steps").item<std::int64_t>();
  const auto skipped = field(state, "skipped_steps").item<std::int64_t>();
  if (!(scale > 0.0) || !std::isfinite(scale) || clean < 0 || skipped < 0) {
    throw std::invalid_argument(fmt::format(
        "loss scaler state: scale {} must be finite and positive, clean_steps {} and skipped_steps {} not "
        "negative",
        scale, clean, skipped));
  }
  scale_ = scale;
  clean_steps_ = clean;
  skipped_steps_ = skipped;
}

}  // namespace dtrain::optim
