// Initial weights from another run and frozen parameters (see Transfer.h).
#include "dtrain/train/Transfer.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <set>
#include <sstream>
#include <stdexcept>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/SafeTensors.h"
#include "dtrain/io/TorchStateDict.h"
#include "dtrain/models/ModelFactory.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kListed = 5;  // mismatches named in one error line

std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// "a, b, c and 4 more".
std::string first_few(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < kListed; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kListed) out += fmt::format(" and {} more", items.size() - kListed);
  return out;
}

// The name prefix of the network's last stage that has parameters ("layers.10."): the classifier
// head of every dtrain classifier.
std::string head_prefix(const models::Network& network) {
  auto layers = network.layers();
  for (std::size_t i = layers->size(); i-- > 0;) {
    if (!layers[i]->parameters().empty()) return fmt::format("layers.{}.", i);
  }
  return "";
}

}  // namespace

fs::path weights_file(const std::string& where, const std::string& what) {
  const fs::path path(where);
  if (fs::is_regular_file(path)) return path;
  if (!fs::is_directory(path)) {
    throw std::invalid_argument(fmt::format(
        "{}: {}: no such file or folder; name a checkpoint, a run folder or a model.pt", what, where));
  }
  if (fs::is_regular_file(path / "model.pt")) return path / "model.pt";
  const auto checkpoints = fs::is_directory(path / "checkpoints") ? path / "checkpoints" : path;
  if (const auto latest = io::CheckpointStore(checkpoints).latest_path()) return *latest;
  throw std::invalid_argument(
      fmt::format("{}: {} holds no model.pt and no checkpoint; train that run to its end first, or name a "
                  "checkpoint file",
                  what, where));
}

std::map<std::string, at::Tensor> read_model_weights(const fs::path& file, const std::string& what) {
  try {
    const auto checkpoint = io::Checkpoint::load(file);
    std::map<std::string, at::Tensor> weights;
    const std::string prefix = "model.";
    for (const auto& [name, tensor] : checkpoint.tensors()) {
      if (name.rfind(prefix, 0) == 0) weights[name.substr(prefix.size())] = tensor;
    }
    if (weights.empty()) {
      throw std::invalid_argument(fmt::format(
          "{}: checkpoint {} holds no model tensors (\"model.*\"); name a run's checkpoint or model.pt", what,
          file.string()));
    }
    return weights;
  } catch (const io::CheckpointError&) {
    // Not a dtrain checkpoint: a torch.save dict is the other form.
  }
  try {
    return io::import_state_dict(file);
  } catch (const io::CheckpointError&) {
    throw std::invalid_argument(
        fmt::format("{}: {} is neither a dtrain checkpoint nor a torch.save dict of tensors (model.pt); name "
                    "a run folder, a "
                    "checkpoint-*.ckpt or a model.pt",
                    what, file.string()));
  }
}

std::vector<std::string> TransferReport::lines() const {
  std::vector<std::string> out;
  if (!source.empty()) {
    out.push_back(
        fmt::format("model.init_from: {} of the model's tensors loaded from {}, {} kept as initialised",
                    loaded.size(), source, kept.size()));
    if (!head.empty()) out.push_back("model.init_from: " + head);
    for (const auto& k : kept) out.push_back("model.init_from: kept " + k);
    if (!unused.empty()) {
      out.push_back(fmt::format("model.init_from: {} tensor(s) of the file not used: {}", unused.size(),
                                first_few(unused)));
    }
  }
  if (!frozen.empty()) {
    out.push_back(
        fmt::format("model.freeze: {} parameter tensor(s) frozen: {}", frozen.size(), first_few(frozen)));
  }
  return out;
}

TransferReport load_matching(models::Network& network, const std::map<std::string, at::Tensor>& weights,
                             bool strict, const std::string& source) {
  TransferReport report;
  report.source = source;
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& p : network.named_parameters(/*recurse=*/true)) targets.emplace_back(p.key(), p.value());
  for (const auto& b : network.named_buffers(/*recurse=*/true)) targets.emplace_back(b.key(), b.value());

  std::set<std::string> used;
  std::vector<std::pair<std::string, at::Tensor>> matched;
  const auto head = head_prefix(network);
  for (const auto& [name, target] : targets) {
    const auto it = weights.find(name);
    if (it == weights.end()) {
      report.kept.push_back(name + " (not in the file)");
      continue;
    }
    used.insert(name);
    if (it->second.sizes() != target.sizes()) {
      report.kept.push_back(
          fmt::format("{} (file {}, model {})", name, shape_text(it->second), shape_text(target)));
      // A classifier trained for another number of classes: its head differs in outputs only.
      if (!head.empty() && name == head + "weight" && it->second.dim() == target.dim() && target.dim() >= 1 &&
          it->second.sizes().slice(1) == target.sizes().slice(1)) {
        report.head =
            fmt::format("classifier head {} replaced ({} -> {} outputs): it keeps its fresh initialisation",
                        head.substr(0, head.size() - 1), it->second.size(0), target.size(0));
      }
      continue;
    }
    matched.emplace_back(name, it->second);
  }
  for (const auto& [name, tensor] : weights) {
    if (!used.count(name)) report.unused.push_back(name);
  }
  if (strict && (!report.kept.empty() || !report.unused.empty())) {
    auto problems = report.kept;
    for (const auto& u : report.unused) problems.push_back(u + " (not in the model)");
    throw std::invalid_argument(
        fmt::format("model.init_from: {} does not fit model {} exactly ({} mismatch(es): {}); set "
                    "model.init_strict: false to "
                    "load the tensors that match and keep the rest as initialised",
                    source, network.kind(), problems.size(), first_few(problems)));
  }
  if (matched.empty()) {
    throw std::invalid_argument(
        fmt::format("model.init_from: none of the {} tensors in {} fits model {} (e.g. {}); were they saved "
                    "from another model?",
                    weights.size(), source, network.kind(), first_few(report.kept)));
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    for (const auto& [m, value] : matched) {
      if (m == name) {
        target.copy_(value);
        report.loaded.push_back(name);
        break;
      }
    }
  }
  return report;
}

bool glob_match(const std::string& pattern, const std::string& name) {
  // Iterative wildcard matching with one backtrack point: the last '*' seen.
  std::size_t p = 0, n = 0, star = std::string::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> freeze_parameters(torch::nn::Module& module,
                                           const std::vector<std::string>& patterns) {
  auto parameters = module.named_parameters(/*recurse=*/true);
  for (const auto& pattern : patterns) {
    bool any = false;
    for (const auto& p : parameters) any = any || glob_match(pattern, p.key());
    if (!any) {
      std::vector<std::string> names;
      for (const auto& p : parameters) names.push_back(p.key());
      throw std::invalid_argument(
          fmt::format("model.freeze: pattern \"{}\" matches no parameter; the parameters are named {}",
                      pattern, first_few(names)));
    }
  }
  std::vector<std::string> frozen;
  if (patterns.empty()) return frozen;
  for (auto& p : parameters) {
    for (const auto& pattern : patterns) {
      if (glob_match(pattern, p.key())) {
        p.value().set_requires_grad(false);
        frozen.push_back(p.key());
        break;
      }
    }
  }
  if (frozen.size() == parameters.size()) {
    throw std::invalid_argument(
        fmt::format("model.freeze: the patterns freeze all {} parameters, so nothing would train; freeze "
                    "fewer (e.g. not the "
                    "classifier head)",
                    parameters.size()));
  }
  return frozen;
}

std::optional<fs::path> hugging_face_file(const std::string& where) {
  const fs::path path(where);
  if (fs::is_regular_file(path)) {
    if (path.extension() == ".safetensors" || path.filename() == "pytorch_model.bin") return path;
    return std::nullopt;
  }
  // A folder save_pretrained wrote; the safetensors file first, as transformers reads it.
  if (!fs::is_directory(path) || fs::exists(path / "model.pt") || fs::is_directory(path / "checkpoints")) {
    return std::nullopt;
  }
  for (const char* name : {"model.safetensors", "pytorch_model.bin"}) {
    if (fs::is_regular_file(path / name)) return path / name;
  }
  return std::nullopt;
}

TransferReport load_hugging_face(models::Network& network, const fs::path& file, bool strict) {
  const auto* import = models::hugging_face_import(network.kind());
  if (!import) {
    throw std::invalid_argument(fmt::format(
        "model.init_from: {} is a Hugging Face checkpoint, and model {} reads none (albert does); "
        "name a dtrain checkpoint or model.pt",
        file.string(), network.kind()));
  }
  std::map<std::string, at::Tensor> weights;
  try {
    // pytorch_model.bin is torch.save's zip of an OrderedDict, which LibTorch's unpickler cannot
    // read: Note [A restricted unpickler for state dicts].
    weights =
        file.extension() == ".safetensors" ? io::read_safetensors(file) : io::read_torch_state_dict(file);
  } catch (const io::CheckpointError& e) {
    throw std::invalid_argument(std::string("model.init_from: ") + e.what());
  }
  auto imported = (*import)(weights, network, strict, file.string());
  TransferReport report;
  report.source = file.string();
  report.kept = std::move(imported.kept);
  report.unused = std::move(imported.unused);
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, at::Tensor& target) {
    const auto it = imported.tensors.find(name);
    if (it == imported.tensors.end()) return;
    target.copy_(it->second);
    report.loaded.push_back(name);
  };
  for (auto& p : network.named_parameters(/*recurse=*/true)) copy(p.key(), p.value());
  for (auto& b : network.named_buffers(/*recurse=*/true)) copy(b.key(), b.value());
  return report;
}

TransferReport apply_transfer(models::Network& network, const config::ModelConfig& config) {
  TransferReport report;
  if (network.deferred() && !config.init_from.empty()) {
    throw std::invalid_argument(
        "model.init_from: loads weights into a model built whole, and model.deferred_init builds each rank's "
        "part from train.seed when the strategy cuts it; set model.deferred_init: false");
  }
  std::optional<fs::path> hugging_face;
  if (!config.init_from.empty()) hugging_face = hugging_face_file(config.init_from);
  if (hugging_face) {
    report = load_hugging_face(network, *hugging_face, config.init_strict);
  } else if (!config.init_from.empty()) {
    const auto file = weights_file(config.init_from);
    report = load_matching(network, read_model_weights(file), config.init_strict, file.string());
  }
  report.frozen = freeze_parameters(network, config.freeze);
  return report;
}

}  // namespace dtrain::train
