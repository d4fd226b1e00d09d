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

namespace {

// A stage's forward with what the network adds around it: its input function, its recomputation,
// its output function (each optional).
torch::Tensor run_stage(torch::nn::AnyModule& stage, torch::Tensor x, bool recomputed,
                        const Network::StageFunction* input, const Network::StageFunction* output) {
  if (input && *input) x = (*input)(x);
  x = recomputed ? recompute(stage, x) : stage.forward(x);
  if (output && *output) x = (*output)(x);
  return x;
}

const Network::StageFunction* find_function(const std::map<std::size_t, Network::StageFunction>& functions,
                                            std::size_t stage) {
  const auto it = functions.find(stage);
  return it == functions.end() ? nullptr : &it->second;
}

}  // namespace

torch::Tensor Network::forward(torch::Tensor input) {
  if (recomputed_.empty() && stage_inputs_.empty() && stage_outputs_.empty()) {
    return layers_->forward(in_memory_order(input));
  }
  auto x = in_memory_order(input);
  std::size_t s = 0;
  for (auto& stage : *layers_) {
    x = run_stage(stage, x, recomputed(s), find_function(stage_inputs_, s), find_function(stage_outputs_, s));
    ++s;
  }
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

// A stage as stages() hands it out when the network adds to it (recomputation, an input or output
// function): run_stage() over the stage, whose module it holds.
class WrappedStageImpl : public torch::nn::Module {
 public:
  WrappedStageImpl(torch::nn::AnyModule stage, bool recomputed, Network::StageFunction input,
                   Network::StageFunction output)
      : stage_(std::move(stage)),
        recomputed_(recomputed),
        input_(std::move(input)),
        output_(std::move(output)) {
    register_module("stage", stage_.ptr());
  }
  torch::Tensor forward(const torch::Tensor& input) {
    return run_stage(stage_, input, recomputed_, &input_, &output_);
  }

 private:
  torch::nn::AnyModule stage_;
  bool recomputed_;
  Network::StageFunction input_;
  Network::StageFunction output_;
};
TORCH_MODULE(WrappedStage);

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
  for (std::size_t s = 0; s < out.size(); ++s) {
    const auto* input = find_function(stage_inputs_, s);
    const auto* output = find_function(stage_outputs_, s);
    if (!recomputed(s) && !input && !output) continue;
    out[s] = torch::nn::AnyModule(WrappedStage(out[s], recomputed(s), input ? *input : StageFunction{},
                                               output ? *output : StageFunction{}));
  }
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

void Network::set_stage_input(std::size_t stage, StageFunction function) {
  check_stages("set_stage_input", {stage}, layers_->size());
  if (function)
    stage_inputs_[stage] = std::move(function);
  else
    stage_inputs_.erase(stage);
}

void Network::set_stage_output(std::size_t stage, StageFunction function) {
  check_stages("set_stage_output", {stage}, layers_->size());
  if (function)
    stage_outputs_[stage] = std::move(function);
  else
    stage_outputs_.erase(stage);
}

bool Network::recomputed(std::size_t stage) const {
  return std::binary_search(recomputed_.begin(), recomputed_.end(), stage);
}

}  // namespace dtrain::models
