// models::LayerNorm and models::Embedding: torch::nn::LayerNorm and torch::nn::Embedding whose
// forward can be replaced (set_forward), as models::Linear's can: what tensor parallelism uses to
// run a vocabulary shard of an embedding or a LayerNorm over a shard of the sequence
// (parallel/TensorParallel.h), LibTorch's modules having no forward hooks. Parameters, names and the plain
// forward are LibTorch's.
#pragma once

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <functional>
#include <utility>

namespace dtrain::models {

using ReplacedForward = std::function<torch::Tensor(const torch::Tensor& input)>;

class LayerNormImpl : public torch::nn::LayerNormImpl {
 public:
  using torch::nn::LayerNormImpl::LayerNormImpl;
  // Runs in place of the plain forward when set. Null: the plain forward.
  void set_forward(ReplacedForward forward) { forward_ = std::move(forward); }
  bool forward_replaced() const { return static_cast<bool>(forward_); }
  torch::Tensor forward(const torch::Tensor& input) {
    return forward_ ? forward_(input) : torch::nn::LayerNormImpl::forward(input);
  }

 private:
  ReplacedForward forward_;
};
TORCH_MODULE(LayerNorm);

class EmbeddingImpl : public torch::nn::EmbeddingImpl {
 public:
  using torch::nn::EmbeddingImpl::EmbeddingImpl;
  void set_forward(ReplacedForward forward) { forward_ = std::move(forward); }
  bool forward_replaced() const { return static_cast<bool>(forward_); }
  torch::Tensor forward(const torch::Tensor& input) {
    return forward_ ? forward_(input) : torch::nn::EmbeddingImpl::forward(input);
  }

 private:
  ReplacedForward forward_;
};
TORCH_MODULE(Embedding);

}  // namespace dtrain::models
