// See MixedPrecision.h.
#include "dtrain/parallel/MixedPrecision.h"

#include <torch/torch.h>

#include <stdexcept>

#include "dtrain/optim/Autocast.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {
namespace {

const std::string kScalerPrefix = "strategy/loss_scaler/";

}  // namespace

torch::Tensor round_through_half(const torch::Tensor& tensor) {
  if (!tensor.defined() || !torch::isFloatingType(tensor.scalar_type())) return tensor;
  return tensor.to(torch::kHalf).to(tensor.scalar_type());
}

void check_precision_optimizer(optim::Precision precision, const torch::optim::Optimizer& optimizer) {
  if (precision == optim::Precision::Fp16 && dynamic_cast<const torch::optim::LBFGS*>(&optimizer)) {
    throw std::invalid_argument(
        "train.precision: fp16 skips steps whose gradients overflow, which lbfgs's own closure loop does not "
        "allow; use optim.name: sgd, adam or adamw, or train.precision: fp32 or bf16");
  }
}

MixedPrecision::MixedPrecision(optim::Precision precision, comm::CommunicatorPtr comm,
                               optim::LossScalerOptions scaler)
    : precision_(precision), comm_(std::move(comm)) {
  if (precision_ == optim::Precision::Fp16) scaler_.emplace(scaler);
}

torch::Tensor MixedPrecision::forward(models::Network& network, const torch::Tensor& inputs) const {
  switch (precision_) {
    case optim::Precision::Fp32:
      return network.forward(inputs);
    case optim::Precision::Bf16: {
      torch::Tensor outputs;
      {
        optim::AutocastGuard autocast(true, torch::kBFloat16, inputs.device().type());
        outputs = network.forward(inputs);
      }
      return torch::isFloatingType(outputs.scalar_type()) ? outputs.to(torch::kFloat) : outputs;
    }
    case optim::Precision::Fp16: {
      if (inputs.is_cuda()) {
        // A GPU computes in float16: autocast as torch.amp does it (Note [fp16 numerics] is the CPU's).
        torch::Tensor outputs;
        {
          optim::AutocastGuard autocast(true, torch::kHalf, at::kCUDA);
          outputs = network.forward(inputs);
        }
        return torch::isFloatingType(outputs.scalar_type()) ? outputs.to(torch::kFloat) : outputs;
      }
      // Network::forward's own steps, one stage at a time. See Note [fp16 numerics].
      auto x = inputs;
      x = network.in_memory_order(x);
      for (auto& stage : network.stages()) x = stage.forward(round_through_half(x));
      return round_through_half(x);
    }
  }
  throw std::logic_error("MixedPrecision: unknown precision");
}

MixedPrecision::HalfWeights::HalfWeights(std::vector<torch::Tensor> parameters, bool active) {
  if (!active) return;
  torch::NoGradGuard no_grad;
  parameters_ = std::move(parameters);
  for (auto& p : parameters_) {
    masters_.push_back(p.detach().clone());
    p.detach().copy_(round_through_half(p.detach()));
  }
}

MixedPrecision::HalfWeights::~HalfWeights() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters_.size(); ++i) parameters_[i].detach().copy_(masters_[i]);
}

std::unique_ptr<MixedPrecision::HalfWeights> MixedPrecision::half_weights(
    const std::vector<torch::Tensor>& parameters) const {
  // Only the CPU's emulation rounds the weights; autocast on a GPU casts them as each op runs.
  return std::make_unique<HalfWeights>(parameters,
                                       precision_ == optim::Precision::Fp16 && !on_gpu(parameters));
}

bool MixedPrecision::on_gpu(const std::vector<torch::Tensor>& parameters) {
  return !parameters.empty() && parameters.front().is_cuda();
}

bool MixedPrecision::check_gradients(const std::vector<torch::Tensor>& parameters) const {
  if (!scaler_) return false;
  torch::NoGradGuard no_grad;
  if (on_gpu(parameters)) {
    // One multi-tensor check on the GPU and one read of its flag, as GradScaler's unscale_ and
    // step do (gradients are float32 there: autocast's backward casts them to the master weights).
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    if (grads.empty()) return false;
    auto found = torch::zeros({1}, grads.front().options());
    const auto unit = torch::ones({1}, grads.front().options());
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found, unit);
    return found.item<float>() > 0.0F;
  }
  for (const auto& p : parameters) {
    if (p.grad().defined()) p.grad().copy_(round_through_half(p.grad()));
  }
  return optim::LossScaler::found_non_finite(parameters);
}

bool MixedPrecision::agree(bool local_overflow, double* communication_seconds) {
  last_skipped_ = false;
  if (!scaler_) return true;
  auto overflow = torch::tensor({local_overflow ? 1.0F : 0.0F});
  if (comm_ && comm_->size() > 1) {
    const auto start = util::Clock::now();
    comm_->allreduce(overflow);  // a sum: positive when any rank overflowed
    if (communication_seconds) *communication_seconds += util::seconds_since(start);
  }
  last_skipped_ = !scaler_->update(overflow.item<float>() > 0.0F);
  return !last_skipped_;
}

void MixedPrecision::unscale(const std::vector<torch::Tensor>& parameters, double scale) const {
  torch::NoGradGuard no_grad;
  if (on_gpu(parameters)) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : parameters) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
    at::_foreach_div_(grads, scale);
    return;
  }
  for (const auto& p : parameters) {
    if (p.grad().defined()) p.grad().div_(scale);
  }
}

bool MixedPrecision::finish_gradients(const std::vector<torch::Tensor>& parameters,
                                      double* communication_seconds) {
  if (!scaler_) return true;
  const double scale = scaler_->scale();
  const bool step = agree(check_gradients(parameters), communication_seconds);
  if (step) unscale(parameters, scale);
  return step;
}

void MixedPrecision::save(io::Checkpoint& checkpoint) const {
  if (!scaler_) return;
  for (const auto& [field, value] : scaler_->state()) checkpoint.set_tensor(kScalerPrefix + field, value);
}

void MixedPrecision::load(const io::Checkpoint& checkpoint) {
  if (!scaler_ || !checkpoint.contains(kScalerPrefix + "scale")) return;
  std::map<std::string, torch::Tensor> state;
  for (const auto& [key, value] : checkpoint.tensors()) {
    if (key.rfind(kScalerPrefix, 0) == 0) state.emplace(key.substr(kScalerPrefix.size()), value);
  }
  scaler_->load_state(state);
}

}  // namespace dtrain::parallel
