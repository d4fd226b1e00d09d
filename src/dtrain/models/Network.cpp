// Network and InputSpec: the model interface shared by every architecture.
#include "dtrain/models/Network.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <utility>

namespace dtrain::models {

InputSpec InputSpec::image(std::int64_t channels, std::int64_t height, std::int64_t width,
                           std::int64_t num_classes) {
  InputSpec spec;
  spec.sample_shape = {channels, height, width};
  spec.num_classes = num_classes;
  return spec;
}

InputSpec InputSpec::tokens(std::int64_t vocab_size, std::int64_t seq_len, std::int64_t num_classes) {
  InputSpec spec;
  spec.sample_shape = {seq_len};
  spec.num_classes = num_classes;
  spec.vocab_size = vocab_size;
  spec.seq_len = seq_len;
  return spec;
}

std::string InputSpec::describe() const {
  if (is_tokens()) {
    return fmt::format("tokens T={} V={}", seq_len, vocab_size);
  }
  return fmt::format("{}", fmt::join(sample_shape, "x"));
}

Network::Network(std::string kind, torch::nn::Sequential layers)
    : kind_(std::move(kind)), layers_(register_module("layers", std::move(layers))) {}

torch::Tensor Network::in_memory_order(const torch::Tensor& input) const {
  const bool wanted = channels_last_ || (channels_last_on_cpu_ && input.device().is_cpu());
  return wanted && input.dim() == 4 ? input.contiguous(at::MemoryFormat::ChannelsLast) : input;
}

torch::Tensor Network::forward(torch::Tensor input) {
  return layers_->forward(in_memory_order(input));
}

NetworkPtr network(std::string kind, torch::nn::Sequential layers) {
  return std::make_shared<Network>(std::move(kind), std::move(layers));
}

std::vector<torch::nn::AnyModule> Network::stages() const {
  // AnyModule copies share the wrapped module, so the stages train this network's parameters.
  return std::vector<torch::nn::AnyModule>(layers_->begin(), layers_->end());
}

}  // namespace dtrain::models
