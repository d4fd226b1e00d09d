// The taps dAD reads: for every models::Linear of a model, each training forward's input X and,
// through a hook on the output, the gradient Δ that flows back into the output, both with their
// leading dimensions flattened (a (B, T, d) sequence gives B*T rows), so transformer projections
// and attention count like any other Linear layer.
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
    models::LinearImpl* module = nullptr;
    std::int64_t in_features = 0;
    std::int64_t out_features = 0;
    // One entry per forward call since clear(); deltas[i] stays undefined until backward reaches it.
    std::vector<torch::Tensor> inputs;  // (rows, in_features)
    std::vector<torch::Tensor> deltas;  // (rows, out_features)
    // Bumped by clear(): a hook from a graph recorded before it finds its step gone and does nothing.
    std::uint64_t generation = 0;

    std::int64_t rows() const;
    // The step's rows concatenated in call order; every call's Δ must have arrived.
    torch::Tensor input() const;
    torch::Tensor delta() const;
  };

  // Taps every models::Linear of `model` whose weight is trained, in module order.
  explicit LinearTaps(torch::nn::Module& model);
  ~LinearTaps();
  LinearTaps(const LinearTaps&) = delete;
  LinearTaps& operator=(const LinearTaps&) = delete;

  std::deque<Layer>& layers() { return layers_; }
  const std::deque<Layer>& layers() const { return layers_; }
  // Forgets what the last step recorded.
  void clear();
  // Records only the layers whose entry is true (one per layer, in layers() order); a layer whose
  // gradient travels whole costs nothing extra. All layers are recorded after construction.
  void record_only(const std::vector<bool>& recorded);

 private:
  std::deque<Layer> layers_;  // stable addresses: the taps and hooks point into it
};

}  // namespace dtrain::parallel
