// create_model(): name -> builder, plus the parameter count and summary line the run logs.
#include "dtrain/models/ModelFactory.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/models/Albert.h"
#include "dtrain/models/Architectures.h"

namespace dtrain::models {

namespace {

struct ModelEntry {
  config::Choice choice;
  ModelBuilder build;
  HuggingFaceImport import_hugging_face = nullptr;  // null: the model reads no Hugging Face checkpoint
};

// `choice` with the keys of model.* it reads among those only some models read
// (config::model_specific_keys): the others are refused for it by name.
config::Choice reading(config::Choice choice, std::vector<std::string> keys) {
  choice.reads = std::move(keys);
  return choice;
}

// Every model, written once: its name (matched without regard to case), its help line, and its
// builder. config/ validates model.name against this list, and each model's other keys against
// what it declares it reads (Choice::reads).
std::vector<ModelEntry> builtin_models() {
  const std::vector<std::string> transformer_keys{"dim", "depth", "heads", "mlp_ratio", "dropout"};
  auto with = [](std::vector<std::string> keys, std::initializer_list<const char*> more) {
    keys.insert(keys.end(), more.begin(), more.end());
    return keys;
  };
  return {
      {reading({"mlp", "multi-layer perceptron: model.hidden layers with model.activation"},
               {"hidden", "activation", "dropout"}),
       detail::build_mlp},
      {reading({"mnistnet", "Catalyst dAD's MNIST network: two convolutions, dropout, two linear layers"},
               {}),
       detail::build_mnistnet},
      {reading({"dinnocnn",
                "DiNNO's CNN: one ReLU convolution (model.num_filters, model.kernel_size), max pool, two "
                "linear layers (model.linear_width)",
                {"MNISTConvNet"}},
               {"num_filters", "kernel_size", "linear_width"}),
       detail::build_dinnocnn},
      {reading({"lenet5", "LeNet-5: two convolutions with max pooling, three linear layers", {"lenet"}},
               {"dropout"}),
       detail::build_lenet5},
      {reading({"resnet18", "ResNet-18, basic blocks; model.stem cifar (3x3) or imagenet (7x7 + max pool)"},
               {"stem", "dropout"}),
       [](const config::ModelConfig& c, const InputSpec& i) { return detail::build_resnet(c, i, 18); }},
      {reading({"resnet50", "ResNet-50, bottleneck blocks; model.stem cifar or imagenet"},
               {"stem", "dropout"}),
       [](const config::ModelConfig& c, const InputSpec& i) { return detail::build_resnet(c, i, 50); }},
      {reading({"vit", "vision transformer: model.patch, dim, depth, heads, mlp_ratio"},
               with(transformer_keys, {"patch"})),
       detail::build_vit},
      {reading({"transformer", "transformer encoder on token sequences; model.task classifier or lm"},
               with(transformer_keys, {"task"})),
       detail::build_transformer},
      {reading({"gpt",
                "GPT-2-style decoder language model: causal pre-norm blocks, learned positions, output layer "
                "tied to the token embedding (model.tie_embeddings); model.dim, depth, heads, mlp_ratio"},
               with(transformer_keys, {"tie_embeddings"})),
       [](const config::ModelConfig& c, const InputSpec& i) {
         return detail::build_gpt(c, i, c.tie_embeddings);
       }},
      {reading(
           {"albert",
            "ALBERT (Lan et al. 2020) sequence classifier: factorized embedding, one layer shared by all; "
            "model.size tiny|base|large, model.albert.*",
            {},
            {"albert"}},
           {"size", "dropout"}),
       detail::build_albert, import_albert},
  };
}

// The built-in models, registered on first use, and then the program's own (register_model): a
// program's static registration may run before this file's, in whichever order the linker chose.
std::vector<ModelEntry>& model_table() {
  static std::vector<ModelEntry> table = [] {
    auto models = builtin_models();
    for (const auto& entry : models) config::register_choice(config::kModelKey, entry.choice);
    return models;
  }();
  return table;
}

[[maybe_unused]] const bool kModelsRegistered = !model_table().empty();

}  // namespace

bool register_model(config::Choice choice, ModelBuilder build) {
  if (!build) throw std::logic_error("register_model(" + choice.name + "): the builder is empty");
  // The table first: the built-in names are registered before this one is checked against them.
  auto& table = model_table();
  config::register_choice(config::kModelKey, choice);
  table.push_back({std::move(choice), std::move(build)});
  return true;
}

NetworkPtr create_model(const config::ModelConfig& config, const InputSpec& input) {
  const auto name = config::registered_choices(config::kModelKey).resolve(config.name);
  for (const auto& entry : model_table()) {
    if (!name || entry.choice.name != *name) continue;
    // Only gpt reads the key: an untied output layer asked of another model would be ignored.
    if (!config.tie_embeddings && entry.choice.name != "gpt") {
      throw std::invalid_argument(fmt::format(
          "model.tie_embeddings: model {} has no output layer tied to its embedding (only gpt does), found "
          "false; remove model.tie_embeddings",
          config.name));
    }
    auto network = entry.build(config, input);
    if (config.deferred_init && !network->deferred()) {
      throw std::invalid_argument(fmt::format(
          "model.deferred_init: model {} is built at once, stage by stage deferral is what vit and "
          "transformer "
          "do (a model of one's own: build it with models::deferred_network); set model.deferred_init: false",
          config.name));
    }
    return network;
  }
  throw std::invalid_argument(
      fmt::format("model.name: expected one of {}, found '{}'; set model.name to one of them",
                  config::registered_choices(config::kModelKey).list(), config.name));
}

const HuggingFaceImport* hugging_face_import(const std::string& kind) {
  for (const auto& entry : model_table()) {
    if (entry.choice.name == kind && entry.import_hugging_face) return &entry.import_hugging_face;
  }
  return nullptr;
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
  if (network.kind() == "transformer-lm" || network.kind() == "gpt") {
    output = fmt::format("next-token logits over {} tokens", input.vocab_size);
  } else {
    output = fmt::format("{} classes", input.num_classes);
  }
  return fmt::format("{}: {} parameters in {} stages, input {} -> {}", network.kind(),
                     with_thousands(parameter_count(network)), network.layers()->size(), input.describe(),
                     output);
}

}  // namespace dtrain::models

DTRAIN_LINK_ANCHOR(dtrain_models_registry);
