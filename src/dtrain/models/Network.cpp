// Network and InputSpec: the model interface shared by every architecture.
#include "dtrain/models/Network.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "dtrain/models/Recompute.h"

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
    return pad_id >= 0 ? fmt::format("tokens T={} V={} pad={}", seq_len, vocab_size, pad_id)
                       : fmt::format("tokens T={} V={}", seq_len, vocab_size);
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
  if (recomputed_.empty()) return layers_->forward(in_memory_order(input));
  auto x = in_memory_order(input);
  std::size_t s = 0;
  for (auto& stage : *layers_) x = recomputed(s++) ? recompute(stage, x) : stage.forward(x);
  return x;
}

NetworkPtr network(std::string kind, torch::nn::Sequential layers) {
  auto out = std::make_shared<Network>(std::move(kind), std::move(layers));
  std::vector<std::size_t> all(out->layers()->size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  out->set_blocks(std::move(all));
  return out;
}

namespace {

// A recomputed stage as stages() hands it out: recompute() over the stage, whose module it holds.
class RecomputedStageImpl : public torch::nn::Module {
 public:
  explicit RecomputedStageImpl(torch::nn::AnyModule stage) : stage_(std::move(stage)) {
    register_module("stage", stage_.ptr());
  }
  torch::Tensor forward(const torch::Tensor& input) { return recompute(stage_, input); }

 private:
  torch::nn::AnyModule stage_;
};
TORCH_MODULE(RecomputedStage);

void check_stages(const char* what, const std::vector<std::size_t>& stages, std::size_t count) {
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (stages[i] >= count || (i > 0 && stages[i] <= stages[i - 1])) {
      throw std::invalid_argument(
          fmt::format("Network::{}: expected ascending stage indices below {}, found {}", what, count,
                      fmt::join(stages, ", ")));
    }
  }
}

}  // namespace

std::vector<torch::nn::AnyModule> Network::stages() const {
  // AnyModule copies share the wrapped module, so the stages train this network's parameters.
  std::vector<torch::nn::AnyModule> out(layers_->begin(), layers_->end());
  for (const auto s : recomputed_) out[s] = torch::nn::AnyModule(RecomputedStage(out[s]));
  return out;
}

void Network::set_blocks(std::vector<std::size_t> stages) {
  check_stages("set_blocks", stages, layers_->size());
  blocks_ = std::move(stages);
}

void Network::set_recomputed(std::vector<std::size_t> stages) {
  check_stages("set_recomputed", stages, layers_->size());
  recomputed_ = std::move(stages);
}

bool Network::recomputed(std::size_t stage) const {
  return std::binary_search(recomputed_.begin(), recomputed_.end(), stage);
}

}  // namespace dtrain::models
