// vit (Dosovitskiy et al. 2021: patches, class token, pre-norm encoder), transformer: an encoder
// classifier over image rows or tokens, or a causal language model, and gpt: GPT-2's decoder (causal
// pre-norm blocks, learned positions, a bias-free output layer tied to the token embedding).
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dtrain/models/Architectures.h"
#include "dtrain/models/TransformerBlocks.h"

namespace dtrain::models::detail {

namespace {

AttentionOptions attention_options(const std::string& model, const config::ModelConfig& config, bool causal) {
  if (config.dim <= 0 || config.heads <= 0 || config.depth <= 0) {
    throw std::invalid_argument(fmt::format(
        "{}: expected positive model.dim, model.heads and model.depth, found dim {}, heads {}, depth {}",
        model, config.dim, config.heads, config.depth));
  }
  if (config.dim % config.heads != 0) {
    throw std::invalid_argument(fmt::format(
        "{}: expected model.heads to divide model.dim, found dim {} and heads {}; choose heads among the "
        "divisors of dim",
        model, config.dim, config.heads));
  }
  const auto hidden = static_cast<std::int64_t>(std::llround(config.mlp_ratio * config.dim));
  if (!(config.mlp_ratio > 0.0) || hidden < 1) {
    throw std::invalid_argument(
        fmt::format("{}: expected model.mlp_ratio > 0 (the MLP is mlp_ratio * dim wide), found {}", model,
                    config.mlp_ratio));
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    throw std::invalid_argument(
        fmt::format("{}: expected model.dropout in [0, 1), found {}", model, config.dropout));
  }
  AttentionOptions options;
  options.dim = config.dim;
  options.heads = config.heads;
  options.mlp_hidden = hidden;
  options.dropout = config.dropout;
  options.causal = causal;
  return options;
}

// Appends builders of `depth` encoder blocks; returns their stage indices (the network's blocks).
std::vector<std::size_t> push_blocks(std::vector<StageBuilder>& stages, const AttentionOptions& options,
                                     int depth) {
  std::vector<std::size_t> blocks;
  for (int i = 0; i < depth; ++i) {
    blocks.push_back(stages.size());
    stages.push_back([options] { return torch::nn::AnyModule(EncoderBlock(options)); });
  }
  return blocks;
}

// The network of these stages, built at once or deferred as model.deferred_init says.
NetworkPtr assemble(const config::ModelConfig& config, std::string kind,
                    const std::vector<StageBuilder>& stages, std::vector<std::size_t> blocks) {
  auto network = config.deferred_init ? deferred_network(std::move(kind), stages)
                                      : eager_network(std::move(kind), stages);
  network->set_blocks(std::move(blocks));
  return network;
}

template <class Module, class... Args>
StageBuilder stage(Args... args) {
  return [args...] { return torch::nn::AnyModule(Module(args...)); };
}

}  // namespace

NetworkPtr build_vit(const config::ModelConfig& config, const InputSpec& input) {
  require_image_input("vit", input);
  require_classes("vit", input);
  const auto options = attention_options("vit", config, /*causal=*/false);
  const auto channels = input.sample_shape[0];
  const auto height = input.sample_shape[1];
  const auto width = input.sample_shape[2];
  if (config.patch <= 0 || height % config.patch != 0 || width % config.patch != 0) {
    throw std::invalid_argument(fmt::format(
        "vit: expected model.patch to divide the image size {}x{}, found patch {}; choose a common divisor "
        "of height and width (or set data.image_size to a multiple of the patch)",
        height, width, config.patch));
  }
  std::vector<StageBuilder> stages{
      stage<PatchEmbedding>(channels, height, width, config.patch, config.dim, config.dropout)};
  auto blocks = push_blocks(stages, options, config.depth);
  stages.push_back(stage<ClassifierHead>(config.dim, input.num_classes, Pooling::ClassToken));
  return assemble(config, "vit", stages, std::move(blocks));
}

NetworkPtr build_gpt(const config::ModelConfig& config, const InputSpec& input, bool tied) {
  if (!input.is_tokens() || input.seq_len <= 0) {
    throw std::invalid_argument(fmt::format(
        "gpt: expected token inputs with a vocabulary and a sequence length, found {}; use data.dataset: "
        "text or wikitext",
        input.describe()));
  }
  const auto options = attention_options("gpt", config, /*causal=*/true);
  // Built at once: the head holds the embedding's weight itself, which a stage built again on its
  // own could not (model.deferred_init is refused for gpt by create_model).
  TokenEmbedding embedding(input.vocab_size, input.seq_len, config.dim, config.dropout);
  std::vector<StageBuilder> stages{[embedding] { return torch::nn::AnyModule(embedding); }};
  auto blocks = push_blocks(stages, options, config.depth);
  stages.push_back([=] {
    return torch::nn::AnyModule(
        GptHead(config.dim, input.vocab_size, tied ? embedding->token_weight() : torch::Tensor()));
  });
  auto network = eager_network("gpt", stages);
  network->set_blocks(std::move(blocks));
  return network;
}

NetworkPtr build_transformer(const config::ModelConfig& config, const InputSpec& input) {
  if (config.task == config::Task::Lm) {
    if (!input.is_tokens() || input.seq_len <= 0) {
      throw std::invalid_argument(
          fmt::format("transformer (task lm): expected token inputs with a vocabulary and a sequence length, "
                      "found {}; use "
                      "data.dataset: text, or model.task: classifier for images",
                      input.describe()));
    }
    const auto options = attention_options("transformer", config, /*causal=*/true);
    std::vector<StageBuilder> stages{
        stage<TokenEmbedding>(input.vocab_size, input.seq_len, config.dim, config.dropout)};
    auto blocks = push_blocks(stages, options, config.depth);
    stages.push_back(stage<LanguageModelHead>(config.dim, input.vocab_size));
    return assemble(config, "transformer-lm", stages, std::move(blocks));
  }
  if (input.is_tokens() && input.num_classes <= 0) {
    throw std::invalid_argument(
        "transformer (task classifier): this token data set has no classes to predict (a character-level "
        "text set is for language modelling); set model.task: lm");
  }
  require_classes("transformer", input);
  auto options = attention_options("transformer", config, /*causal=*/false);
  // Padded sentences: the padding is neither attended to nor pooled (Note [Padding beside the
  // activations]).
  if (input.is_tokens() && input.pad_id >= 0) options.padding = std::make_shared<PaddingMask>();
  std::vector<StageBuilder> stages;
  if (input.is_tokens()) {
    if (input.seq_len <= 0) {
      throw std::invalid_argument(fmt::format(
          "transformer: expected a positive sequence length for token inputs, found {}", input.seq_len));
    }
    stages.push_back(stage<TokenEmbedding>(input.vocab_size, input.seq_len, config.dim, config.dropout,
                                           input.pad_id, options.padding));
  } else {
    require_image_input("transformer", input);
    stages.push_back(stage<RowEmbedding>(input.sample_shape[0], input.sample_shape[1], input.sample_shape[2],
                                         config.dim, config.dropout));
  }
  auto blocks = push_blocks(stages, options, config.depth);
  stages.push_back(stage<ClassifierHead>(config.dim, input.num_classes, Pooling::Mean, options.padding));
  return assemble(config, "transformer", stages, std::move(blocks));
}

}  // namespace dtrain::models::detail
