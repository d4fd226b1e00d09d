// See LossScaler.h. The state machine is GradScaler's (torch/amp/grad_scaler.py, _amp_update_scale_
// in aten/src/ATen/native/cuda/AmpKernels.cu): on a GPU its kernels run it, elsewhere the same
// arithmetic as tensor operations (Note [A loss scaler on the device]).
#include "dtrain/optim/LossScaler.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "dtrain/optim/FusedKernels.h"

namespace dtrain::optim {
namespace {

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
  return config::kPrecisionNames.name(precision);
}

Precision parse_precision(const std::string& name) {
  return config::kPrecisionNames.parse(name, "precision");
}

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  if (!(options_.init_scale > 0.0) || !(options_.growth_factor > 1.0) || !(options_.backoff_factor > 0.0) ||
      !(options_.backoff_factor < 1.0) || options_.growth_interval < 1) {
    throw std::invalid_argument(fmt::format(
        "loss scaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= "
        "1; got {}, {}, {}, {}",
        options_.init_scale, options_.growth_factor, options_.backoff_factor, options_.growth_interval));
  }
  scale_ = torch::full({1}, options_.init_scale, torch::kFloat);
  growth_tracker_ = torch::zeros({1}, torch::kInt);
  skipped_ = torch::zeros({1}, torch::kLong);
  found_inf_ = torch::zeros({1}, torch::kFloat);
}

void LossScaler::to(const torch::Device& device) {
  if (scale_.device() == device) return;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  skipped_ = skipped_.to(device);
  found_inf_ = found_inf_.to(device);
}

double LossScaler::scale() const {
  return scale_.item<double>();
}

std::int64_t LossScaler::clean_steps() const {
  return growth_tracker_.item<std::int64_t>();
}

std::int64_t LossScaler::skipped_steps() const {
  return skipped_.item<std::int64_t>();
}

void LossScaler::clear_found_inf() {
  found_inf_.zero_();
}

void LossScaler::check(const std::vector<torch::Tensor>& grads, bool unscale) {
  if (grads.empty()) return;
  torch::NoGradGuard no_grad;
  const auto inv_scale = unscale ? scale_.reciprocal() : torch::ones_like(scale_);
  if (fused_on(FusedKernel::AmpScaler, found_inf_.device())) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
    return;
  }
  const auto factor = inv_scale.reshape({});
  for (const auto& grad : grads) {
    found_inf_.add_(torch::isfinite(grad).logical_not().any());
    if (unscale) grad.mul_(factor);
  }
}

void LossScaler::update() {
  torch::NoGradGuard no_grad;
  const auto overflow = found_inf_ > 0;
  if (fused_on(FusedKernel::AmpScaler, scale_.device())) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                           options_.backoff_factor, options_.growth_interval);
  } else {
    const auto tracked = growth_tracker_ + 1;
    const auto at_interval = tracked >= options_.growth_interval;
    const auto grown = scale_ * options_.growth_factor;
    const auto kept = torch::where(at_interval.logical_and(torch::isfinite(grown)), grown, scale_);
    scale_.copy_(torch::where(overflow, scale_ * options_.backoff_factor, kept));
    growth_tracker_.copy_(
        torch::where(overflow.logical_or(at_interval), torch::zeros_like(tracked), tracked));
  }
  skipped_.add_(overflow);
}

bool LossScaler::update(bool overflow) {
  found_inf_.fill_(overflow ? 1.0 : 0.0);
  update();
  return !overflow;
}

std::map<std::string, torch::Tensor> LossScaler::state() const {
  return {{"scale", torch::tensor({scale()}, torch::kDouble)},
          {"clean_steps", torch::tensor({clean_steps()}, torch::kLong)},
          {"skipped_steps", torch::tensor({skipped_steps()}, torch::kLong)}};
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
  scale_.fill_(scale);
  growth_tracker_.fill_(clean);
  skipped_.fill_(skipped);
}

}  // namespace dtrain::optim
