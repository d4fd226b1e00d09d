// See LinearTaps.h.
#include "dtrain/parallel/dad/LinearTaps.h"

#include <torch/torch.h>

namespace dtrain::parallel {
namespace {

void record(LinearTaps::Layer& layer, const torch::Tensor& input, const torch::Tensor& output) {
  // Evaluation (no gradient) and frozen layers leave nothing to synchronise.
  if (!output.requires_grad()) return;
  const std::size_t call = layer.inputs.size();
  // Under bf16 autocast the layer's input and output gradient are bfloat16; the weight gradient
  // rebuilt from them belongs to the float32 master weight, as autograd's would.
  const auto dtype = layer.module->weight.scalar_type();
  layer.inputs.push_back(input.detach().to(dtype).reshape({-1, layer.in_features}));
  layer.deltas.emplace_back();
  auto* target = &layer;
  const auto out_features = layer.out_features;
  const auto generation = layer.generation;
  output.register_hook([target, call, out_features, generation, dtype](const torch::Tensor& grad) {
    if (target->generation != generation || call >= target->deltas.size()) return;
    target->deltas[call] = grad.detach().to(dtype).reshape({-1, out_features});
  });
}

}  // namespace

std::int64_t LinearTaps::Layer::rows() const {
  std::int64_t n = 0;
  for (const auto& x : inputs) n += x.size(0);
  return n;
}

torch::Tensor LinearTaps::Layer::input() const {
  TORCH_INTERNAL_ASSERT(!inputs.empty(), "Linear layer ", name, " saw no training forward this step");
  return inputs.size() == 1 ? inputs.front() : torch::cat(inputs);
}

torch::Tensor LinearTaps::Layer::delta() const {
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    TORCH_INTERNAL_ASSERT(deltas[i].defined(), "Linear layer ", name, ": call ", i,
                          " got no gradient in backward (its output does not reach the loss)");
  }
  TORCH_INTERNAL_ASSERT(!deltas.empty(), "Linear layer ", name, " saw no training forward this step");
  return deltas.size() == 1 ? deltas.front() : torch::cat(deltas);
}

LinearTaps::LinearTaps(torch::nn::Module& model) {
  for (const auto& entry : model.named_modules()) {
    auto* linear = dynamic_cast<models::LinearImpl*>(entry.value().get());
    if (!linear || !linear->weight.requires_grad()) continue;
    Layer layer;
    layer.name = entry.key();
    layer.module = linear;
    layer.in_features = linear->options.in_features();
    layer.out_features = linear->options.out_features();
    layers_.push_back(std::move(layer));
  }
  record_only(std::vector<bool>(layers_.size(), true));
}

void LinearTaps::record_only(const std::vector<bool>& recorded) {
  TORCH_INTERNAL_ASSERT(recorded.size() == layers_.size());
  std::size_t i = 0;
  for (auto& layer : layers_) {
    auto* target = &layer;
    if (recorded[i++]) {
      layer.module->set_tap(
          [target](const torch::Tensor& in, const torch::Tensor& out) { record(*target, in, out); });
    } else {
      layer.module->set_tap(nullptr);
    }
  }
}

LinearTaps::~LinearTaps() {
  for (auto& layer : layers_) layer.module->set_tap(nullptr);
}

void LinearTaps::clear() {
  for (auto& layer : layers_) {
    layer.inputs.clear();
    layer.deltas.clear();
    ++layer.generation;
  }
}

}  // namespace dtrain::parallel
