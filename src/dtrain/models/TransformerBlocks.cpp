// Self-attention, the pre-norm encoder block, embeddings and heads for vit and transformer.
#include "dtrain/models/TransformerBlocks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

namespace dtrain::models {

namespace {

// Learned embeddings start small, as in ViT and GPT-2 (normal, std 0.02).
torch::Tensor small_normal(torch::IntArrayRef shape) {
  return torch::empty(shape).normal_(0.0, 0.02);
}

}  // namespace

SelfAttentionImpl::SelfAttentionImpl(const AttentionOptions& options) : options_(options) {
  TORCH_INTERNAL_ASSERT(options.heads > 0 && options.dim % options.heads == 0);
  qkv_ = register_module("qkv", Linear(options.dim, 3 * options.dim));
  projection_ = register_module("projection", Linear(options.dim, options.dim));
  attention_dropout_ = register_module("attention_dropout", torch::nn::Dropout(options.dropout));
}

torch::Tensor SelfAttentionImpl::forward(torch::Tensor x) {
  const auto head_dim = options_.dim / options_.heads;
  // (N, T, 3*dim) -> 3 x (N, heads, T, head_dim). N and T are the projection's: under sequence
  // parallelism x is a slice of the sequence, which qkv gathers whole.
  auto projected = qkv_->forward(x);
  const auto n = projected.size(0);
  const auto t = projected.size(1);
  const auto heads = projected.size(-1) / (3 * head_dim);
  auto qkv = projected.view({n, t, 3, heads, head_dim}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0];
  auto k = qkv[1];
  auto v = qkv[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  if (options_.causal) {
    auto future = torch::ones({t, t}, torch::dtype(torch::kBool).device(x.device())).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  }
  if (options_.padding) {
    const auto& padded = options_.padding->padded;  // (N, T) -> keys (N, 1, 1, T)
    TORCH_INTERNAL_ASSERT(
        padded.defined() && padded.size(0) == n && padded.size(1) == t,
        "attention: no padding mask for this batch (Note [Padding beside the activations])");
    scores = scores.masked_fill(padded.view({n, 1, 1, t}), -std::numeric_limits<float>::infinity());
  }
  auto weights = attention_dropout_->forward(torch::softmax(scores, -1));
  // (N, heads, T, head_dim) -> (N, T, dim)
  auto context = torch::matmul(weights, v).transpose(1, 2).reshape({n, t, heads * head_dim});
  return projection_->forward(context);
}

EncoderBlockImpl::EncoderBlockImpl(const AttentionOptions& options) {
  norm1_ = register_module("norm1", LayerNorm(torch::nn::LayerNormOptions({options.dim})));
  attention_ = register_module("attention", SelfAttention(options));
  norm2_ = register_module("norm2", LayerNorm(torch::nn::LayerNormOptions({options.dim})));
  fc1_ = register_module("fc1", Linear(options.dim, options.mlp_hidden));
  fc2_ = register_module("fc2", Linear(options.mlp_hidden, options.dim));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

torch::Tensor EncoderBlockImpl::forward(torch::Tensor x) {
  x = x + dropout_->forward(attention_->forward(norm1_->forward(x)));
  auto hidden = torch::gelu(fc1_->forward(norm2_->forward(x)));
  return x + dropout_->forward(fc2_->forward(dropout_->forward(hidden)));
}

PatchEmbeddingImpl::PatchEmbeddingImpl(std::int64_t channels, std::int64_t height, std::int64_t width,
                                       std::int64_t patch, std::int64_t dim, double dropout)
    : patch_(patch) {
  TORCH_INTERNAL_ASSERT(patch > 0 && height % patch == 0 && width % patch == 0);
  const auto patches = (height / patch) * (width / patch);
  projection_ = register_module("projection", Linear(channels * patch * patch, dim));
  class_token_ = register_parameter("class_token", small_normal({1, 1, dim}));
  position_ = register_parameter("position", small_normal({1, patches + 1, dim}));
  dropout_ = register_module("dropout", torch::nn::Dropout(dropout));
}

torch::Tensor PatchEmbeddingImpl::forward(torch::Tensor images) {
  const auto n = images.size(0);
  const auto c = images.size(1);
  const auto gh = images.size(2) / patch_;
  const auto gw = images.size(3) / patch_;
  // (N, C, gh, p, gw, p) -> (N, gh*gw, C*p*p): one row per patch, channels outermost.
  auto patches = images.reshape({n, c, gh, patch_, gw, patch_})
                     .permute({0, 2, 4, 1, 3, 5})
                     .reshape({n, gh * gw, c * patch_ * patch_});
  auto tokens = projection_->forward(patches);
  tokens = torch::cat({class_token_.expand({n, 1, class_token_.size(2)}), tokens}, 1);
  if (tokens.size(1) != position_.size(1)) {
    throw std::invalid_argument(fmt::format(
        "vit: expected images of the size the model was built for ({} patches), found {}x{}; build the "
        "model for this image size",
        position_.size(1) - 1, images.size(2), images.size(3)));
  }
  return dropout_->forward(tokens + position_);
}

RowEmbeddingImpl::RowEmbeddingImpl(std::int64_t channels, std::int64_t height, std::int64_t width,
                                   std::int64_t dim, double dropout) {
  projection_ = register_module("projection", Linear(channels * width, dim));
  position_ = register_parameter("position", small_normal({1, height, dim}));
  dropout_ = register_module("dropout", torch::nn::Dropout(dropout));
}

torch::Tensor RowEmbeddingImpl::forward(torch::Tensor images) {
  const auto n = images.size(0);
  if (images.dim() != 4 || images.size(2) != position_.size(1) ||
      images.size(1) * images.size(3) != projection_->options.in_features()) {
    throw std::invalid_argument(fmt::format(
        "transformer: expected images of the shape the model was built for ({} rows of {} values), found "
        "shape ({}); build the model for this image size",
        position_.size(1), projection_->options.in_features(), fmt::join(images.sizes(), ", ")));
  }
  // (N, C, H, W) -> (N, H, C*W)
  auto rows = images.permute({0, 2, 1, 3}).reshape({n, images.size(2), images.size(1) * images.size(3)});
  return dropout_->forward(projection_->forward(rows) + position_);
}

TokenEmbeddingImpl::TokenEmbeddingImpl(std::int64_t vocab_size, std::int64_t max_len, std::int64_t dim,
                                       double dropout, std::int64_t pad_id, PaddingMaskPtr padding)
    : max_len_(max_len), pad_id_(pad_id), padding_(std::move(padding)) {
  TORCH_INTERNAL_ASSERT(!padding_ || pad_id_ >= 0);
  tokens_ = register_module("tokens", Embedding(vocab_size, dim));
  torch::NoGradGuard no_grad;
  tokens_->weight.normal_(0.0, 0.02);
  position_ = register_parameter("position", small_normal({1, max_len, dim}));
  dropout_ = register_module("dropout", torch::nn::Dropout(dropout));
}

torch::Tensor TokenEmbeddingImpl::forward(torch::Tensor tokens) {
  const auto t = tokens.size(1);
  if (t > max_len_) {
    throw std::invalid_argument(fmt::format(
        "transformer: expected sequences of at most {} tokens, found {}; set data.seq_len to at most {} or "
        "build the model for longer sequences",
        max_len_, t, max_len_));
  }
  if (padding_) padding_->padded = tokens.eq(pad_id_);
  return dropout_->forward(tokens_->forward(tokens) + position_.narrow(1, 0, t));
}

ClassifierHeadImpl::ClassifierHeadImpl(std::int64_t dim, std::int64_t classes, Pooling pooling,
                                       PaddingMaskPtr padding)
    : pooling_(pooling), padding_(std::move(padding)) {
  norm_ = register_module("norm", LayerNorm(torch::nn::LayerNormOptions({dim})));
  fc_ = register_module("fc", Linear(dim, classes));
}

torch::Tensor ClassifierHeadImpl::forward(torch::Tensor x) {
  x = norm_->forward(x);
  if (pooling_ == Pooling::Mean && padding_) {
    // The mean over the sentence's own tokens: (N, T, 1) weights 1 at a token, 0 at padding.
    const auto& padded = padding_->padded;
    TORCH_INTERNAL_ASSERT(padded.defined() && padded.size(0) == x.size(0) && padded.size(1) == x.size(1),
                          "classifier head: no padding mask for this batch");
    const auto kept = padded.logical_not().unsqueeze(-1).to(x.scalar_type());
    return fc_->forward((x * kept).sum(1) / kept.sum(1).clamp_min(1.0));
  }
  auto pooled = pooling_ == Pooling::ClassToken ? x.select(1, 0) : x.mean(1);
  return fc_->forward(pooled);
}

LanguageModelHeadImpl::LanguageModelHeadImpl(std::int64_t dim, std::int64_t vocab_size) {
  norm_ = register_module("norm", LayerNorm(torch::nn::LayerNormOptions({dim})));
  fc_ = register_module("fc", Linear(dim, vocab_size));
}

torch::Tensor LanguageModelHeadImpl::forward(torch::Tensor x) {
  return fc_->forward(norm_->forward(x));
}

GptHeadImpl::GptHeadImpl(std::int64_t dim, std::int64_t vocab_size, torch::Tensor tied)
    : tied_(std::move(tied)) {
  norm_ = register_module("norm", LayerNorm(torch::nn::LayerNormOptions({dim})));
  if (tied_.defined()) {
    TORCH_INTERNAL_ASSERT(tied_.dim() == 2 && tied_.size(0) == vocab_size && tied_.size(1) == dim);
    return;
  }
  fc_ = register_module("fc", Linear(torch::nn::LinearOptions(dim, vocab_size).bias(false)));
  torch::NoGradGuard no_grad;
  fc_->weight.normal_(0.0, 0.02);
}

void GptHeadImpl::use_tied_parameter(torch::Tensor tensor) {
  TORCH_INTERNAL_ASSERT(tied_.defined() && tensor.sizes() == tied_.sizes());
  tied_ = std::move(tensor);
}

torch::Tensor GptHeadImpl::forward(torch::Tensor x) {
  x = norm_->forward(x);
  return tied_.defined() ? torch::linear(x, tied_) : fc_->forward(x);
}

}  // namespace dtrain::models
