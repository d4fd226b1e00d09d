// See MixedPrecision.h.
#include "dtrain/parallel/MixedPrecision.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/models/KeptState.h"
#include "dtrain/optim/Autocast.h"
#include "dtrain/optim/ForeachOptimizers.h"
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

namespace {

// The state a probe forward may change, put back when it ends however it ends.
class ProbeState {
 public:
  ProbeState(const torch::nn::Module& module, const torch::Device& device)
      : buffers_(module), generators_(models::GeneratorStates::now(device)) {}
  ~ProbeState() {
    buffers_.restore();
    generators_.restore();
  }
  ProbeState(const ProbeState&) = delete;
  ProbeState& operator=(const ProbeState&) = delete;

 private:
  models::KeepBuffers buffers_;
  models::GeneratorStates generators_;
};

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace

void check_precision_runs(optim::Precision precision, models::Network& network,
                          const models::InputSpec& input) {
  if (precision == optim::Precision::Fp32) return;
  const auto parameters = network.parameters();
  const auto device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  if (precision == optim::Precision::Fp16 && device.is_cpu()) return;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
  torch::Tensor x;
  if (input.is_tokens()) {
    x = torch::randint(0, input.vocab_size, {2, input.seq_len}, generator, torch::kLong);
  } else {
    std::vector<std::int64_t> shape{2};
    shape.insert(shape.end(), input.sample_shape.begin(), input.sample_shape.end());
    x = torch::randn(shape, generator);
  }
  x = network.in_memory_order(x.to(device));
  const auto children = network.layers()->named_children();
  auto stages = network.stages();
  ProbeState kept(network, device);
  torch::NoGradGuard no_grad;
  // The stage that fails and its message, or nothing.
  auto probe = [&](bool autocast) -> std::optional<std::pair<std::size_t, std::string>> {
    optim::AutocastGuard guard(
        autocast, precision == optim::Precision::Bf16 ? torch::kBFloat16 : torch::kHalf, device.type());
    auto h = x;
    for (std::size_t i = 0; i < stages.size(); ++i) {
      try {
        h = stages[i].forward(h);
      } catch (const c10::Error& e) {
        return std::make_pair(i, first_line(e.what_without_backtrace()));
      }
    }
    return std::nullopt;
  };
  const auto failed = probe(true);
  // A model that fails in float32 too has another fault (the data's shape): the step reports it.
  if (!failed || probe(false)) return;
  const auto& [stage, message] = *failed;
  const auto name = config::kPrecisionNames.name(precision);
  throw std::invalid_argument(
      fmt::format("train.precision: {}: stage layers.{} ({}) of model {} cannot compute in {} on {}: {}; use "
                  "train.precision: fp32 for this model",
                  name, children[stage].key(), children[stage].value()->name(), network.kind(), name,
                  device.str(), message));
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

torch::Tensor MixedPrecision::loss_scale_tensor() const {
  return scaler_ ? scaler_->scale_tensor() : torch::Tensor();
}

util::DeviceScalar MixedPrecision::loss_scale_figure() const {
  return scaler_ ? util::DeviceScalar::of(scaler_->scale_tensor()) : util::DeviceScalar(0.0);
}

std::vector<torch::Tensor> MixedPrecision::gradients_to_check(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  // Autocast's backward on a GPU leaves float32 gradients of the master weights; the CPU's
  // emulation rounds them as fp16 hardware would have produced them.
  if (!on_gpu(parameters)) {
    for (auto& grad : grads) grad.copy_(round_through_half(grad));
  }
  if (!grads.empty()) scaler_->to(grads.front().device());
  return grads;
}

void MixedPrecision::finish_gradients_on_device(const std::vector<torch::Tensor>& parameters,
                                                double* communication_seconds) {
  if (!scaler_) return;
  const auto grads = gradients_to_check(parameters);
  scaler_->clear_found_inf();
  scaler_->check(grads, /*unscale=*/true);
  if (comm_ && comm_->size() > 1) {
    const auto start = util::Clock::now();
    comm_->allreduce(scaler_->found_inf());  // a sum: positive when any rank overflowed
    if (communication_seconds) *communication_seconds += util::seconds_since(start);
  }
  scaler_->found_inf().clamp_max_(1.0);  // a count of overflows becomes the flag fused kernels test
  last_skipped_ = util::DeviceScalar::of(scaler_->found_inf());
  scaler_->update();
}

void MixedPrecision::step(torch::optim::Optimizer& optimizer) const {
  if (!scaler_) {
    optimizer.step();
    return;
  }
  if (auto* fused = dynamic_cast<optim::FusedStep*>(&optimizer);
      fused && fused->step_unless(scaler_->found_inf())) {
    return;
  }
  if (scaler_->found_inf().item<float>() == 0.0F) optimizer.step();
}

bool MixedPrecision::finish_gradients(const std::vector<torch::Tensor>& parameters,
                                      double* communication_seconds) {
  if (!scaler_) return true;
  finish_gradients_on_device(parameters, communication_seconds);
  return scaler_->found_inf().item<float>() == 0.0F;
}

bool MixedPrecision::check_gradients(const std::vector<torch::Tensor>& parameters) {
  if (!scaler_) return false;
  const auto grads = gradients_to_check(parameters);
  scaler_->clear_found_inf();
  scaler_->check(grads, /*unscale=*/false);
  return scaler_->found_inf().item<float>() > 0.0F;
}

bool MixedPrecision::agree(bool local_overflow, double* communication_seconds) {
  last_skipped_ = 0.0;
  if (!scaler_) return true;
  auto overflow = torch::tensor({local_overflow ? 1.0F : 0.0F});
  if (comm_ && comm_->size() > 1) {
    const auto start = util::Clock::now();
    comm_->allreduce(overflow);  // a sum: positive when any rank overflowed
    if (communication_seconds) *communication_seconds += util::seconds_since(start);
  }
  const bool step = scaler_->update(overflow.item<float>() > 0.0F);
  last_skipped_ = step ? 0.0 : 1.0;
  return step;
}

void MixedPrecision::unscale(const std::vector<torch::Tensor>& parameters, double scale) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (on_gpu(parameters)) {
    at::_foreach_div_(grads, scale);
    return;
  }
  for (auto& grad : grads) grad.div_(scale);
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
