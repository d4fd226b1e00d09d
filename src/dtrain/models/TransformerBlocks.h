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
#include <memory>

#include "dtrain/models/Layers.h"
#include "dtrain/models/Linear.h"
#include "dtrain/models/TiedParameters.h"

namespace dtrain::models {

// Note [Padding beside the activations]
// A token classifier on padded sentences (InputSpec::pad_id) must neither attend to nor pool the
// padding, but its stages (a torch::nn::Sequential) hand each other one tensor. So the token
// embedding writes where the batch is padded here, and every block's attention and the head's
// pooling read it: one object the model's stages share. That holds while its stages run one after
// another in one process (every strategy but pipeline, which refuses such a model, and
// recomputation, which re-runs a block within the same micro-batch's backward).
struct PaddingMask {
  torch::Tensor padded;  // (N, T) bool, true at padding: the last batch the embedding saw
};
using PaddingMaskPtr = std::shared_ptr<PaddingMask>;

struct AttentionOptions {
  std::int64_t dim = 64;
  std::int64_t heads = 4;
  std::int64_t mlp_hidden = 128;
  double dropout = 0.0;
  // Each position attends only to itself and earlier ones (language model).
  bool causal = false;
  // Padded keys are not attended to (Note [Padding beside the activations]); null: none.
  PaddingMaskPtr padding;
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
  // padding non-null: each forward records where tokens equal pad_id there (Note [Padding beside
  // the activations]).
  TokenEmbeddingImpl(std::int64_t vocab_size, std::int64_t max_len, std::int64_t dim, double dropout,
                     std::int64_t pad_id = -1, PaddingMaskPtr padding = nullptr);
  torch::Tensor forward(torch::Tensor tokens);
  // Whether its blocks and head read the padding it records: stages that must run in one process.
  bool shares_padding() const { return padding_ != nullptr; }
  // (vocab, dim): the token embedding, which a tied output layer computes with.
  torch::Tensor token_weight() const { return tokens_->weight; }

 private:
  std::int64_t max_len_;
  std::int64_t pad_id_;
  PaddingMaskPtr padding_;
  Embedding tokens_{nullptr};
  torch::Tensor position_;
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(TokenEmbedding);

enum class Pooling { ClassToken, Mean };

// (N, T, dim) -> (N, classes): final norm, pool (class token or mean over tokens, the padding
// left out where `padding` is given), Linear.
class ClassifierHeadImpl : public torch::nn::Module {
 public:
  ClassifierHeadImpl(std::int64_t dim, std::int64_t classes, Pooling pooling,
                     PaddingMaskPtr padding = nullptr);
  torch::Tensor forward(torch::Tensor x);

 private:
  Pooling pooling_;
  PaddingMaskPtr padding_;
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

// gpt's output layer, (N, T, dim) -> (N, T, vocab): final norm, then logits x W^T with no bias, as
// GPT-2's. Tied (`tied` defined, (vocab, dim)): W is the token embedding's weight, which this module
// uses without registering (models/TiedParameters.h); untied: a Linear of its own, "fc.weight".
class GptHeadImpl : public torch::nn::Module, public TiedParameterUser {
 public:
  GptHeadImpl(std::int64_t dim, std::int64_t vocab_size, torch::Tensor tied);
  torch::Tensor forward(torch::Tensor x);
  torch::Tensor tied_parameter() const override { return tied_; }
  void use_tied_parameter(torch::Tensor tensor) override;

 private:
  LayerNorm norm_{nullptr};
  Linear fc_{nullptr};  // untied only
  torch::Tensor tied_;
};
TORCH_MODULE(GptHead);

}  // namespace dtrain::models
