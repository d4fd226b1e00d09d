// See LinearTaps.h.
#include "dtrain/parallel/dad/LinearTaps.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "dtrain/models/Network.h"
#include "dtrain/parallel/dad/LinearProducts.h"

namespace dtrain::parallel {
namespace {

using torch::autograd::Node;

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

// A node's output taken by `consumer` as its input number `input`.
struct Use {
  Node* consumer = nullptr;
  std::size_t input = 0;
};

// The graph below a loss, read once per forward: who consumes each node, and the leaf of each
// parameter. Raw pointers: the loss keeps the graph alive while attach() runs.
struct Graph {
  std::unordered_map<const Node*, std::vector<Use>> consumers;
  std::unordered_map<const c10::TensorImpl*, const Node*> leaves;
};

Graph read_graph(Node* root) {
  Graph graph;
  std::vector<Node*> queue{root};
  std::unordered_set<const Node*> seen{root};
  for (std::size_t i = 0; i < queue.size(); ++i) {
    Node* node = queue[i];
    if (const auto* parameter = linear_graph::leaf_parameter(*node)) graph.leaves.emplace(parameter, node);
    const auto& edges = node->next_edges();
    for (std::size_t k = 0; k < edges.size(); ++k) {
      Node* next = edges[k].function.get();
      if (!next) continue;
      graph.consumers[next].push_back({node, k});
      if (seen.insert(next).second) queue.push_back(next);
    }
  }
  return graph;
}

// Calls `use` on every consumer of `node`'s output, looking through casts and transposes (counted).
void for_each_use(const Graph& graph, const Node* node, int transposes,
                  const std::function<void(const Use&, int transposes)>& use) {
  const auto found = graph.consumers.find(node);
  if (found == graph.consumers.end()) return;
  for (const auto& u : found->second) {
    if (linear_graph::is_cast(*u.consumer)) {
      for_each_use(graph, u.consumer, transposes, use);
    } else if (linear_graph::is_transpose(*u.consumer)) {
      for_each_use(graph, u.consumer, transposes + 1, use);
    } else {
      use(u, transposes);
    }
  }
}

[[noreturn]] void refuse_use(const LinearTaps::Layer& layer, const char* parameter, const Use& use) {
  throw std::invalid_argument(fmt::format(
      "Linear layer '{}' (torch::nn::Linear): its {} reaches {} (input {}) in the autograd graph, not "
      "only a Linear layer's own product; dAD and rank-dAD rebuild only that product's gradient from "
      "the X and Δ they share and would lose the rest, so use the layer only as a Linear layer (on "
      "its input, with its own weight), freeze it, or use parallel.strategy data_parallel",
      layer.name, parameter, use.consumer->name(), use.input));
}

// Keeps Δ (rows, out_features) of one call when backward reaches the call's product; the
// gradients pass on unchanged.
class DeltaHook final : public torch::autograd::FunctionPreHook {
 public:
  DeltaHook(LinearTaps::Layer* layer, std::size_t call, std::uint64_t generation, torch::ScalarType dtype)
      : layer_(layer), call_(call), generation_(generation), dtype_(dtype) {}

  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (layer_->generation == generation_ && call_ < layer_->deltas.size() && grads.front().defined())
      layer_->deltas[call_] = grads.front().detach().to(dtype_).reshape({-1, layer_->out_features});
    return grads;
  }

 private:
  LinearTaps::Layer* layer_;
  std::size_t call_;
  std::uint64_t generation_;
  torch::ScalarType dtype_;
};

// One plain Linear layer's calls in this forward: X from each product, and a hook for its Δ.
void attach_layer(LinearTaps::Layer& layer, const Graph& graph) {
  const auto weight = graph.leaves.find(layer.module->weight.unsafeGetTensorImpl());
  if (weight == graph.leaves.end()) return;  // no part in this forward: input() says so
  std::vector<std::pair<Node*, torch::Tensor>> calls;
  for_each_use(graph, weight->second, 0, [&](const Use& use, int transposes) {
    auto x = transposes == 1 ? linear_graph::product_input(*use.consumer, use.input) : torch::Tensor();
    if (!x.defined()) refuse_use(layer, "weight", use);
    calls.emplace_back(use.consumer, std::move(x));
  });
  if (layer.module->bias.defined() && layer.module->bias.requires_grad()) {
    const auto bias = graph.leaves.find(layer.module->bias.unsafeGetTensorImpl());
    if (bias != graph.leaves.end()) {
      for_each_use(graph, bias->second, 0, [&](const Use& use, int transposes) {
        if (transposes != 0 || !linear_graph::adds_bias(*use.consumer, use.input))
          refuse_use(layer, "bias", use);
      });
    }
  }
  // Under bf16 autocast X and Δ are bfloat16; the gradient rebuilt from them belongs to the
  // float32 master weight, as autograd's would.
  const auto dtype = layer.module->weight.scalar_type();
  for (auto& [product, x] : calls) {
    const std::size_t call = layer.inputs.size();
    layer.inputs.push_back(x.detach().to(dtype).reshape({-1, layer.in_features}));
    layer.deltas.emplace_back();
    product->add_pre_hook(std::make_unique<DeltaHook>(&layer, call, layer.generation, dtype));
  }
}

}  // namespace

std::int64_t LinearTaps::Layer::rows() const {
  std::int64_t n = 0;
  for (const auto& x : inputs) n += x.size(0);
  return n;
}

namespace {

[[noreturn]] void refuse_unused(const std::string& name) {
  throw std::runtime_error(fmt::format(
      "Linear layer '{}' took no part in this training step (it is unused, or its output does not "
      "reach the loss); dAD and rank-dAD share every trained Linear layer's input and output "
      "gradient, so use the layer in every training forward, freeze it, or use parallel.strategy "
      "data_parallel",
      name));
}

// A plain torch::nn::Linear is found in the graph below the loss after forward; a recomputed stage's
// graph exists only while backward runs it again (Note [Activation recomputation]).
void refuse_recomputed_plain(const models::Network& network, const std::string& name) {
  const std::string prefix = "layers.";
  if (!network.any_recomputed() || name.rfind(prefix, 0) != 0) return;
  const auto dot = name.find('.', prefix.size());
  const auto stage =
      name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
  if (stage.empty() || stage.find_first_not_of("0123456789") != std::string::npos) return;
  if (!network.recomputed(std::stoul(stage))) return;
  throw std::invalid_argument(fmt::format(
      "train.activation_checkpointing: Linear layer '{}' is a plain torch::nn::Linear in a recomputed stage; "
      "dAD and rank-dAD find such a layer in the graph after forward, which a recomputed stage builds only "
      "in "
      "backward; make it a dtrain::models::Linear (the same parameters, tapped in its forward) or set "
      "train.activation_checkpointing: none",
      name));
}

}  // namespace

torch::Tensor LinearTaps::Layer::input() const {
  if (inputs.empty()) refuse_unused(name);
  return inputs.size() == 1 ? inputs.front() : torch::cat(inputs);
}

torch::Tensor LinearTaps::Layer::delta() const {
  if (deltas.empty()) refuse_unused(name);
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    if (deltas[i].defined()) continue;
    throw std::runtime_error(fmt::format(
        "Linear layer '{}': call {} of this step got no gradient in backward (its output does not "
        "reach the loss); dAD and rank-dAD need every call's output gradient, so freeze the layer or "
        "use parallel.strategy data_parallel",
        name, i));
  }
  return deltas.size() == 1 ? deltas.front() : torch::cat(deltas);
}

LinearTaps::LinearTaps(torch::nn::Module& model) {
  const auto* network = dynamic_cast<const models::Network*>(&model);
  for (const auto& entry : model.named_modules()) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(entry.value().get());
    if (!linear || !linear->weight.requires_grad()) continue;
    if (network && !dynamic_cast<models::LinearImpl*>(linear)) refuse_recomputed_plain(*network, entry.key());
    Layer layer;
    layer.name = entry.key();
    layer.module = linear;
    layer.tapped_in_forward = dynamic_cast<models::LinearImpl*>(linear);
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
    layer.recorded = recorded[i++];
    if (!layer.tapped_in_forward) continue;  // attach() skips it
    if (layer.recorded) {
      layer.tapped_in_forward->set_tap(
          [target](const torch::Tensor& in, const torch::Tensor& out) { record(*target, in, out); });
    } else {
      layer.tapped_in_forward->set_tap(nullptr);
    }
  }
}

LinearTaps::~LinearTaps() {
  for (auto& layer : layers_) {
    if (layer.tapped_in_forward) layer.tapped_in_forward->set_tap(nullptr);
  }
}

void LinearTaps::attach(const torch::Tensor& loss) {
  // dtrain's own models have only models::Linear layers: nothing here costs them a graph walk.
  const bool any = std::any_of(layers_.begin(), layers_.end(),
                               [](const Layer& layer) { return !layer.tapped_in_forward && layer.recorded; });
  if (!any || !loss.requires_grad() || !loss.grad_fn()) return;
  const auto graph = read_graph(loss.grad_fn().get());
  for (auto& layer : layers_) {
    if (!layer.tapped_in_forward && layer.recorded) attach_layer(layer, graph);
  }
}

void LinearTaps::clear() {
  for (auto& layer : layers_) {
    layer.inputs.clear();
    layer.deltas.clear();
    ++layer.generation;
  }
}

}  // namespace dtrain::parallel
