// albert's names for Hugging Face's tensors (Albert.h): the renaming rule, and a checkpoint read by it.
#include <fmt/format.h>

#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "dtrain/models/Albert.h"

namespace dtrain::models {

namespace {

const std::string kShared = "encoder.albert_layer.";
const std::string kSharedHf = "encoder.albert_layer_groups.0.albert_layers.0.";

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// The file's names as AlbertForSequenceClassification's: "albert." added to an AlbertModel's
// (saved on its own, its names have no prefix), TensorFlow's LayerNorm gamma/beta as weight/bias.
std::map<std::string, at::Tensor> normalised(const std::map<std::string, at::Tensor>& file) {
  bool bare = true;
  for (const auto& [name, tensor] : file) bare = bare && !starts_with(name, "albert.");
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : file) {
    std::string key = bare && (starts_with(name, "embeddings.") || starts_with(name, "encoder.") ||
                               starts_with(name, "pooler."))
                          ? "albert." + name
                          : name;
    const auto dot = key.rfind('.');
    const auto last = dot == std::string::npos ? key : key.substr(dot + 1);
    if (last == "gamma") key = key.substr(0, dot) + ".weight";
    if (last == "beta") key = key.substr(0, dot) + ".bias";
    out[key] = tensor;
  }
  return out;
}

// Hugging Face's ALBERT can group layers (num_hidden_groups) and stack several per group
// (inner_group_num); the paper's, and this one, share a single layer.
void refuse_layer_groups(const std::map<std::string, at::Tensor>& file, const std::string& source) {
  static const std::regex group(R"(albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.)");
  for (const auto& [name, tensor] : file) {
    std::smatch m;
    if (std::regex_search(name, m, group) && (m[1] != "0" || m[2] != "0")) {
      throw std::invalid_argument(fmt::format(
          "model.init_from: {} holds tensor {}: a checkpoint of several layer groups or inner layers "
          "(num_hidden_groups or inner_group_num > 1); dtrain's albert shares one layer across all layers",
          source, name));
    }
  }
}

// Buffers Hugging Face saves that the model derives itself.
bool derived_buffer(const std::string& name) {
  return name == "albert.embeddings.position_ids" || name == "albert.embeddings.token_type_ids";
}

}  // namespace

std::string albert_hugging_face_name(const std::string& name) {
  if (starts_with(name, "layers.0.")) {
    std::string rest = name.substr(9);
    if (starts_with(rest, kShared)) rest = kSharedHf + rest.substr(kShared.size());
    return "albert." + rest;
  }
  if (starts_with(name, "layers.1.pooler.")) return "albert." + name.substr(9);
  if (starts_with(name, "layers.2.classifier.")) return name.substr(9);
  throw std::invalid_argument("albert: " + name + " is not a tensor of model albert");
}

ImportedWeights import_albert(const std::map<std::string, at::Tensor>& raw, const Network& network,
                              bool strict, const std::string& source) {
  const auto file = normalised(raw);
  refuse_layer_groups(file, source);
  ImportedWeights out;
  std::set<std::string> used;
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& p : network.named_parameters(/*recurse=*/true)) targets.emplace_back(p.key(), p.value());
  for (const auto& b : network.named_buffers(/*recurse=*/true)) targets.emplace_back(b.key(), b.value());
  for (const auto& [name, target] : targets) {
    const auto hf = albert_hugging_face_name(name);
    const bool head = starts_with(hf, "classifier.");
    const auto it = file.find(hf);
    if (it == file.end()) {
      if (!head) {
        throw std::invalid_argument(
            fmt::format("model.init_from: {} has no tensor {} (the model's {}); is it an ALBERT checkpoint?",
                        source, hf, name));
      }
      out.kept.push_back(fmt::format("{} ({} is not in the file: a fresh classification head)", name, hf));
      continue;
    }
    used.insert(hf);
    if (it->second.sizes() != target.sizes()) {
      if (!head || strict) {
        throw std::invalid_argument(fmt::format(
            "model.init_from: {}: tensor {} is {}, the model's {} is {}; set model.size and model.albert.* "
            "to the checkpoint's sizes{}",
            source, hf, shape_text(it->second), name, shape_text(target),
            head ? " (or model.init_strict: false for a fresh classification head)" : ""));
      }
      out.kept.push_back(fmt::format("{} ({} is {}, the model's {}: a fresh classification head)", name, hf,
                                     shape_text(it->second), shape_text(target)));
      continue;
    }
    if (!it->second.is_floating_point()) {
      throw std::invalid_argument(
          fmt::format("model.init_from: {}: tensor {} holds {}, expected floating point", source, hf,
                      c10::toString(it->second.scalar_type())));
    }
    out.tensors[name] = it->second;
  }
  for (const auto& [name, tensor] : file) {
    if (!used.count(name) && !derived_buffer(name)) out.unused.push_back(name);
  }
  return out;
}

}  // namespace dtrain::models
