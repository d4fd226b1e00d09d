// albert: the modules of Albert.h, the named sizes, and the builder behind model.name: albert.
#include "dtrain/models/Albert.h"

#include <fmt/format.h>
#include <torch/nn/init.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "dtrain/models/Architectures.h"

namespace dtrain::models {

namespace {

torch::nn::LayerNorm layer_norm(const AlbertOptions& options, std::int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(options.layer_norm_eps));
}

// The lowest score a key can get in `scores`' dtype: exp() of it minus any real score is 0, and a
// row whose keys are all padding stays finite (uniform) instead of NaN, as with Hugging Face's
// additive mask of the dtype's minimum.
double lowest_score(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kHalf:
      return -65504.0;
    case torch::kBFloat16:
      return -3.3895313892515355e38;
    case torch::kDouble:
      return std::numeric_limits<double>::lowest();
    default:
      return std::numeric_limits<float>::lowest();
  }
}

}  // namespace

AlbertOptions albert_size(config::ModelSize size) {
  AlbertOptions options;
  switch (size) {
    case config::ModelSize::Tiny:
      options.embedding_size = 16;
      options.hidden_size = 32;
      options.num_layers = 2;
      options.num_heads = 2;
      options.intermediate_size = 64;
      options.max_positions = 128;
      break;
    case config::ModelSize::Base:
      break;  // the defaults of AlbertOptions
    case config::ModelSize::Large:
      options.hidden_size = 1024;
      options.num_layers = 24;
      options.num_heads = 16;
      options.intermediate_size = 4096;
      break;
  }
  return options;
}

AlbertOptions albert_options(const config::ModelConfig& config, const InputSpec& input) {
  if (!input.is_tokens() || input.seq_len <= 0) {
    throw std::invalid_argument(
        fmt::format("albert: expected token sequences with a vocabulary, found {}; use a token data set",
                    input.describe()));
  }
  detail::require_classes("albert", input);
  AlbertOptions options = albert_size(config.size);
  const auto& a = config.albert;
  const auto over = [](std::int64_t& field, int value) {
    if (value > 0) field = value;
  };
  over(options.embedding_size, a.embedding_size);
  over(options.hidden_size, a.hidden_size);
  over(options.num_layers, a.num_layers);
  over(options.num_heads, a.num_heads);
  over(options.intermediate_size, a.intermediate_size);
  over(options.max_positions, a.max_positions);
  options.vocab_size = a.vocab_size > 0 ? a.vocab_size : input.vocab_size;
  options.classifier_dropout = a.classifier_dropout;
  options.layer_norm_eps = a.layer_norm_eps;
  options.dropout = config.dropout;
  options.pad_id = input.pad_id;
  options.num_classes = input.num_classes;
  if (options.hidden_size % options.num_heads != 0) {
    throw std::invalid_argument(fmt::format(
        "albert: expected model.albert.num_heads to divide the hidden size, found H {} and {} heads; choose "
        "heads among the divisors of H",
        options.hidden_size, options.num_heads));
  }
  if (input.seq_len > options.max_positions) {
    throw std::invalid_argument(
        fmt::format("albert: the data's sequences are {} tokens, the model has {} positions; set "
                    "model.albert.max_positions to at least {} or shorten the sequences",
                    input.seq_len, options.max_positions, input.seq_len));
  }
  if (options.vocab_size < input.vocab_size) {
    throw std::invalid_argument(fmt::format(
        "albert: model.albert.vocab_size {} is smaller than the data's vocabulary of {} ids; set it to at "
        "least {} (or 0: the data's)",
        options.vocab_size, input.vocab_size, input.vocab_size));
  }
  if (options.pad_id >= options.vocab_size) {
    throw std::invalid_argument(
        fmt::format("albert: the data's pad id {} is not an id of the model's {}-token vocabulary; set "
                    "model.albert.vocab_size above it (or 0: the data's)",
                    options.pad_id, options.vocab_size));
  }
  return options;
}

AlbertEmbeddingsImpl::AlbertEmbeddingsImpl(const AlbertOptions& options) {
  using torch::nn::Embedding;
  using torch::nn::EmbeddingOptions;
  auto words = EmbeddingOptions(options.vocab_size, options.embedding_size);
  if (options.pad_id >= 0) words.padding_idx(options.pad_id);
  word_embeddings_ = register_module("word_embeddings", Embedding(words));
  position_embeddings_ =
      register_module("position_embeddings", Embedding(options.max_positions, options.embedding_size));
  token_type_embeddings_ =
      register_module("token_type_embeddings", Embedding(options.type_vocab_size, options.embedding_size));
  layer_norm_ = register_module("LayerNorm", layer_norm(options, options.embedding_size));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

torch::Tensor AlbertEmbeddingsImpl::forward(const torch::Tensor& ids) {
  const auto positions = torch::arange(ids.size(1), ids.options()).unsqueeze(0);  // (1, T)
  const auto types = torch::zeros_like(positions);                                // segment 0
  auto x = word_embeddings_->forward(ids) + token_type_embeddings_->forward(types) +
           position_embeddings_->forward(positions);
  return dropout_->forward(layer_norm_->forward(x));
}

AlbertAttentionImpl::AlbertAttentionImpl(const AlbertOptions& options) : heads_(options.num_heads) {
  TORCH_INTERNAL_ASSERT(options.num_heads > 0 && options.hidden_size % options.num_heads == 0);
  const auto h = options.hidden_size;
  query_ = register_module("query", Linear(h, h));
  key_ = register_module("key", Linear(h, h));
  value_ = register_module("value", Linear(h, h));
  attention_dropout_ = register_module("attention_dropout", torch::nn::Dropout(options.dropout));
  dense_ = register_module("dense", Linear(h, h));
  output_dropout_ = register_module("output_dropout", torch::nn::Dropout(options.dropout));
  layer_norm_ = register_module("LayerNorm", layer_norm(options, h));
}

torch::Tensor AlbertAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& padding) {
  const auto n = x.size(0);
  const auto t = x.size(1);
  const auto h = x.size(2);
  const auto d = h / heads_;
  // (N, T, H) -> (N, heads, T, d)
  const auto split = [&](const torch::Tensor& y) { return y.view({n, t, heads_, d}).transpose(1, 2); };
  const auto q = split(query_->forward(x));
  const auto k = split(key_->forward(x));
  const auto v = split(value_->forward(x));
  auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
  scores = scores.masked_fill(padding.view({n, 1, 1, t}), lowest_score(scores.scalar_type()));
  const auto weights = attention_dropout_->forward(torch::softmax(scores, -1));
  const auto context = torch::matmul(weights, v).transpose(1, 2).reshape({n, t, h});
  return layer_norm_->forward(x + output_dropout_->forward(dense_->forward(context)));
}

AlbertLayerImpl::AlbertLayerImpl(const AlbertOptions& options) {
  full_layer_layer_norm_ = register_module("full_layer_layer_norm", layer_norm(options, options.hidden_size));
  attention_ = register_module("attention", AlbertAttention(options));
  ffn_ = register_module("ffn", Linear(options.hidden_size, options.intermediate_size));
  ffn_output_ = register_module("ffn_output", Linear(options.intermediate_size, options.hidden_size));
}

torch::Tensor AlbertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& padding) {
  const auto a = attention_->forward(x, padding);
  // gelu_new (BERT's and GPT-2's tanh approximation) is torch's gelu with approximate = "tanh".
  // As in the reference implementations, no dropout after the FFN.
  const auto f = ffn_output_->forward(torch::gelu(ffn_->forward(a), "tanh"));
  return full_layer_layer_norm_->forward(f + a);
}

AlbertTransformerImpl::AlbertTransformerImpl(const AlbertOptions& options) : num_layers_(options.num_layers) {
  embedding_hidden_mapping_in_ =
      register_module("embedding_hidden_mapping_in", Linear(options.embedding_size, options.hidden_size));
  albert_layer_ = register_module("albert_layer", AlbertLayer(options));
}

torch::Tensor AlbertTransformerImpl::forward(const torch::Tensor& embedded, const torch::Tensor& padding) {
  auto x = embedding_hidden_mapping_in_->forward(embedded);
  for (std::int64_t i = 0; i < num_layers_; ++i) x = albert_layer_->forward(x, padding);
  return x;
}

AlbertBodyImpl::AlbertBodyImpl(const AlbertOptions& options)
    : pad_id_(options.pad_id), max_positions_(options.max_positions) {
  embeddings_ = register_module("embeddings", AlbertEmbeddings(options));
  encoder_ = register_module("encoder", AlbertTransformer(options));
}

torch::Tensor AlbertBodyImpl::forward(torch::Tensor ids) {
  TORCH_CHECK(ids.dim() == 2 && !ids.is_floating_point(), "albert: expected token ids (N, T), found ",
              ids.sizes(), " of ", ids.scalar_type());
  TORCH_CHECK(ids.size(1) <= max_positions_, "albert: a sequence of ", ids.size(1), " tokens exceeds the ",
              max_positions_, " positions; set model.albert.max_positions");
  ids = ids.to(torch::kLong);
  return encoder_->forward(embeddings_->forward(ids), ids.eq(pad_id_));
}

AlbertPoolerImpl::AlbertPoolerImpl(const AlbertOptions& options) {
  pooler_ = register_module("pooler", Linear(options.hidden_size, options.hidden_size));
}

torch::Tensor AlbertPoolerImpl::forward(torch::Tensor hidden) {
  return torch::tanh(pooler_->forward(hidden.select(1, 0)));
}

AlbertClassifierImpl::AlbertClassifierImpl(const AlbertOptions& options) {
  dropout_ = register_module("dropout", torch::nn::Dropout(options.classifier_dropout));
  classifier_ = register_module("classifier", Linear(options.hidden_size, options.num_classes));
}

torch::Tensor AlbertClassifierImpl::forward(torch::Tensor pooled) {
  return classifier_->forward(dropout_->forward(pooled));
}

NetworkPtr make_albert(const AlbertOptions& options) {
  torch::nn::Sequential layers;
  auto body = AlbertBody(options);
  layers->push_back(body);
  layers->push_back(AlbertPooler(options));
  layers->push_back(AlbertClassifier(options));
  auto network = std::make_shared<Network>("albert", layers);
  torch::NoGradGuard no_grad;
  for (auto& module : network->modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::LinearImpl>()) {
      linear->weight.normal_(0.0, options.initializer_range);
      linear->bias.zero_();
    } else if (auto* embedding = module->as<torch::nn::EmbeddingImpl>()) {
      embedding->weight.normal_(0.0, options.initializer_range);
    }
  }
  if (options.pad_id >= 0)
    body->embeddings()->named_parameters()["word_embeddings.weight"][options.pad_id].zero_();
  // No blocks: the layers are applications of one module inside stage 0, not stages of their own.
  return network;
}

namespace detail {

NetworkPtr build_albert(const config::ModelConfig& config, const InputSpec& input) {
  return make_albert(albert_options(config, input));
}

}  // namespace detail

}  // namespace dtrain::models
