// create_model(): name -> builder, plus the parameter count and summary line the run logs.
#include "dtrain/models/ModelFactory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "dtrain/models/Architectures.h"

namespace dtrain::models {

const std::vector<std::string>& known_models() {
  static const std::vector<std::string> names{"mlp",      "mnistnet", "lenet5",     "resnet18",
                                              "resnet50", "vit",      "transformer"};
  return names;
}

NetworkPtr create_model(const config::ModelConfig& config, const InputSpec& input) {
  std::string name = config.name;
  // Seed 000 spells its models "MNISTNet" and "vit"; accept any case.
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name == "mlp") return detail::build_mlp(config, input);
  if (name == "mnistnet") return detail::build_mnistnet(config, input);
  if (name == "lenet5" || name == "lenet") return detail::build_lenet5(config, input);
  if (name == "resnet18") return detail::build_resnet(config, input, 18);
  if (name == "resnet50") return detail::build_resnet(config, input, 50);
  if (name == "vit") return detail::build_vit(config, input);
  if (name == "transformer") return detail::build_transformer(config, input);
  throw std::invalid_argument(
      fmt::format("model.name: expected one of {}, found '{}'; set model.name to one of them",
                  fmt::join(known_models(), ", "), config.name));
}

std::int64_t parameter_count(const torch::nn::Module& module) {
  std::int64_t count = 0;
  for (const auto& parameter : module.parameters()) count += parameter.numel();
  return count;
}

std::int64_t trainable_parameter_count(const torch::nn::Module& module) {
  std::int64_t count = 0;
  for (const auto& parameter : module.parameters()) {
    if (parameter.requires_grad()) count += parameter.numel();
  }
  return count;
}

namespace {

// 61706 -> "61,706": parameter counts are read by people comparing models.
std::string with_thousands(std::int64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0 && digits[i - 1] != '-') out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace

std::string summary(const Network& network, const InputSpec& input) {
  std::string output;
  if (network.kind() == "transformer-lm") {
    output = fmt::format("next-token logits over {} tokens", input.vocab_size);
  } else {
    output = fmt::format("{} classes", input.num_classes);
  }
  return fmt::format("{}: {} parameters in {} stages, input {} -> {}", network.kind(),
                     with_thousands(parameter_count(network)), network.layers()->size(), input.describe(),
                     output);
}

}  // namespace dtrain::models
