// The pieces the vision transformer and the text transformer share: multi-head self-attention
// built from Linear layers (so dAD sees every projection), a pre-norm encoder block, embeddings
// for patches, image rows and tokens, and the classification and language-model heads.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>

#include "dtrain/models/Layers.h"
#include "dtrain/models/Linear.h"

namespace dtrain::models {

struct AttentionOptions {
  std::int64_t dim = 64;
  std::int64_t heads = 4;
  std::int64_t mlp_hidden = 128;
  double dropout = 0.0;
  // Each position attends only to itself and earlier ones (language model).
  bool causal = false;
};

// (N, T, dim) -> (N, T, dim). The heads it computes are those the qkv projection yields (3 x heads x
// head_dim outputs), so under tensor parallelism, where qkv holds a rank's share of the heads, it
// computes that share and the projection takes them (parallel/TensorParallel.h).
class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(const AttentionOptions& options);
  torch::Tensor forward(torch::Tensor x);
  // The heads of the whole layer (its options), whatever share of them qkv computes.
  std::int64_t heads() const { return options_.heads; }

 private:
  AttentionOptions options_;
  Linear qkv_{nullptr};
  Linear projection_{nullptr};
  torch::nn::Dropout attention_dropout_{nullptr};
};
TORCH_MODULE(SelfAttention);

// x + attention(norm(x)), then x + mlp(norm(x)): the pre-norm block of ViT and GPT-2.
class EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit EncoderBlockImpl(const AttentionOptions& options);
  torch::Tensor forward(torch::Tensor x);

 private:
  LayerNorm norm1_{nullptr};
  SelfAttention attention_{nullptr};
  LayerNorm norm2_{nullptr};
  Linear fc1_{nullptr};
  Linear fc2_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(EncoderBlock);

// (N, C, H, W) -> (N, 1 + patches, dim): non-overlapping patches flattened and projected by a
// Linear layer, a learned class token prepended, learned position embeddings added.
class PatchEmbeddingImpl : public torch::nn::Module {
 public:
  PatchEmbeddingImpl(std::int64_t channels, std::int64_t height, std::int64_t width, std::int64_t patch,
                     std::int64_t dim, double dropout);
  torch::Tensor forward(torch::Tensor images);

 private:
  std::int64_t patch_;
  Linear projection_{nullptr};
  torch::Tensor class_token_;
  torch::Tensor position_;
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(PatchEmbedding);

// (N, C, H, W) -> (N, H, dim): each image row (C*W values) is one token, so a sequence model can
// classify images without patching.
class RowEmbeddingImpl : public torch::nn::Module {
 public:
  RowEmbeddingImpl(std::int64_t channels, std::int64_t height, std::int64_t width, std::int64_t dim,
                   double dropout);
  torch::Tensor forward(torch::Tensor images);

 private:
  Linear projection_{nullptr};
  torch::Tensor position_;
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(RowEmbedding);

// (N, T) token ids -> (N, T, dim), T <= max_len.
class TokenEmbeddingImpl : public torch::nn::Module {
 public:
  TokenEmbeddingImpl(std::int64_t vocab_size, std::int64_t max_len, std::int64_t dim, double dropout);
  torch::Tensor forward(torch::Tensor tokens);

 private:
  std::int64_t max_len_;
  Embedding tokens_{nullptr};
  torch::Tensor position_;
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(TokenEmbedding);

enum class Pooling { ClassToken, Mean };

// (N, T, dim) -> (N, classes): final norm, pool (class token or mean over tokens), Linear.
class ClassifierHeadImpl : public torch::nn::Module {
 public:
  ClassifierHeadImpl(std::int64_t dim, std::int64_t classes, Pooling pooling);
  torch::Tensor forward(torch::Tensor x);

 private:
  Pooling pooling_;
  LayerNorm norm_{nullptr};
  Linear fc_{nullptr};
};
TORCH_MODULE(ClassifierHead);

// (N, T, dim) -> (N, T, vocab): final norm and the next-token projection.
class LanguageModelHeadImpl : public torch::nn::Module {
 public:
  LanguageModelHeadImpl(std::int64_t dim, std::int64_t vocab_size);
  torch::Tensor forward(torch::Tensor x);

 private:
  LayerNorm norm_{nullptr};
  Linear fc_{nullptr};
};
TORCH_MODULE(LanguageModelHead);

}  // namespace dtrain::models
