// The taps dAD reads: for every Linear layer of a model whose weight is trained, each training
// forward's input X and the gradient Δ that flows back into its output, both with their leading
// dimensions flattened (a (B, T, d) sequence gives B*T rows), so transformer projections and
// attention count like any other Linear layer. Two kinds of layer are tapped:
//   - dtrain's models::Linear (every Linear of dtrain's models) by the tap in its forward, which
//     registers a hook on the output;
//   - a user's plain torch::nn::Linear, wherever it sits in the module tree, through the autograd
//     graph: after each training forward, attach() walks the graph from the loss, finds each use of
//     the layer's weight in a matrix product (LinearProducts.h), keeps X from what the product saved
//     for backward and hooks the product's node for Δ. Each product is one call, so a layer used
//     twice in a forward gives two calls.
// Catalyst dAD registers a forward and a backward hook on every nn.Linear; LibTorch's C++ modules
// have no hooks and torch::nn::LinearImpl::forward is not virtual, so the autograd graph is the one
// place a plain Linear layer's X and Δ can be seen without changing the user's model.
// A weight the graph uses other than as a Linear layer's product is refused (attach() throws): dAD
// rebuilds only Δᵀ X and would lose the rest of that weight's gradient.
#pragma once

#include <torch/nn/module.h>

#include <deque>
#include <string>
#include <vector>

#include "dtrain/models/Linear.h"

namespace dtrain::parallel {

class LinearTaps {
 public:
  struct Layer {
    std::string name;  // the module's dotted name, e.g. "layers.1"; its parameters are name.weight/.bias
    torch::nn::LinearImpl* module = nullptr;  // its weight, bias and shape
    // dtrain's Linear, tapped in its forward; null for a plain torch::nn::Linear, tapped in the graph.
    models::LinearImpl* tapped_in_forward = nullptr;
    // Whether this step's calls are kept (record_only()).
    bool recorded = true;
    std::int64_t in_features = 0;
    std::int64_t out_features = 0;
    // One entry per forward call since clear(); deltas[i] stays undefined until backward reaches it.
    std::vector<torch::Tensor> inputs;  // (rows, in_features)
    std::vector<torch::Tensor> deltas;  // (rows, out_features)
    // Bumped by clear(): a hook from a graph recorded before it finds its step gone and does nothing.
    std::uint64_t generation = 0;

    std::int64_t rows() const;
    // The step's rows concatenated in call order; every call's Δ must have arrived. Both throw
    // std::runtime_error naming the layer when it saw no training forward this step (it is unused)
    // or a call's output got no gradient (it does not reach the loss).
    torch::Tensor input() const;
    torch::Tensor delta() const;
  };

  // Taps every Linear layer (models::Linear or torch::nn::Linear) of `model` whose weight is
  // trained, in module order.
  explicit LinearTaps(torch::nn::Module& model);
  ~LinearTaps();
  LinearTaps(const LinearTaps&) = delete;
  LinearTaps& operator=(const LinearTaps&) = delete;

  std::deque<Layer>& layers() { return layers_; }
  const std::deque<Layer>& layers() const { return layers_; }
  // Forgets what the last step recorded.
  void clear();
  // After each training forward, with its loss: records the calls of every plain torch::nn::Linear
  // in the graph below it and hooks their Δ. Walking from the loss rather than the model's output
  // also finds a weight the loss uses (a penalty term). Nothing to do without recorded plain
  // layers or when the loss has no graph (evaluation). Throws std::invalid_argument naming the
  // layer and the node where a recorded layer's weight or bias is used other than as a Linear
  // layer's.
  void attach(const torch::Tensor& loss);
  // Records only the layers whose entry is true (one per layer, in layers() order); a layer whose
  // gradient travels whole costs nothing extra. All layers are recorded after construction.
  void record_only(const std::vector<bool>& recorded);

 private:
  std::deque<Layer> layers_;  // stable addresses: the taps and hooks point into it
};

}  // namespace dtrain::parallel
