// The dAD paper's flags as overrides of our keys; see DadFlags.h. One table row per flag: its name, its
// help (the keys it sets) and the overrides a value stands for.
#include "dtrain/cli/DadFlags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "dtrain/config/RunConfigYaml.h"

namespace dtrain::cli {
namespace {

using Overrides = std::vector<config::Override>;

// `text` names the flag in errors: "--lr fast".
config::Override key(const std::string& key, const std::string& value, const std::string& text) {
  return config::Override{key, value, text, /*flag=*/true};
}

// A value that is text, not YAML: quoted where YAML would read it as something else ("a: b", "[x").
std::string yaml_text(const std::string& value) {
  YAML::Emitter out;
  out << value;
  return out.c_str();
}

std::string flow_yaml(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

YAML::Node load(const std::string& value, const std::string& text, const char* expected) {
  try {
    return YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(fmt::format("{}: {}; it does not parse ({})", text, expected, e.msg));
  }
}

// --N: the paper's training-set size, -1 for all of it; ours is data.subset_size, 0 for all.
Overrides training_size(const std::string& text, const std::string& value) {
  std::size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || (n < 1 && n != -1)) {
    throw std::invalid_argument(
        fmt::format("{}: expected a positive number of training samples, or -1 for all of them", text));
  }
  return {key("data.subset_size", n == -1 ? "0" : value, text)};
}

// The model options a keyword may name: model.* but the name.
std::vector<std::string> model_options() {
  std::vector<std::string> out;
  for (const auto& k : config::config_keys()) {
    if (k.rfind("model.", 0) == 0 && k != "model.name") out.push_back(k.substr(6));
  }
  return out;
}

// --model-kwargs "{'hidden': [1024]}": a Python dict literal, read as a YAML flow mapping (single
// quotes, lists and numbers mean the same in both); each entry is model.<key>.
Overrides model_kwargs(const std::string& text, const std::string& value) {
  const char* expected = "expected a Python dict of model options, e.g. \"{'hidden': [1024]}\"";
  const YAML::Node dict = load(value, text, expected);
  if (dict.IsNull()) return {};
  if (!dict.IsMap()) throw std::invalid_argument(fmt::format("{}: {}", text, expected));
  Overrides out;
  for (const auto& entry : dict) {
    const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const bool word = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '_';
    });
    if (!word || name == "name") {
      throw std::invalid_argument(fmt::format("{}: '{}' is not a model option; expected one of {}{}", text,
                                              name, fmt::join(model_options(), ", "),
                                              name == "name" ? " (the model itself is --model)" : ""));
    }
    out.push_back(key("model." + name, flow_yaml(entry.second), text));
  }
  return out;
}

// --model-args: positional arguments of the paper's model constructors. Ours take named options
// only, so a positional list has nothing it could honestly mean; an empty one means nothing.
Overrides model_args(const std::string& text, const std::string& value) {
  const std::string trimmed = value.substr(0, value.find_last_not_of(" \t") + 1);
  if (trimmed.empty() || trimmed == "[]" || trimmed == "()") return {};
  throw std::invalid_argument(fmt::format(
      "{}: dtrain's models take named options, not positional arguments, so these cannot be passed "
      "on; give them by name with --model-kwargs \"{{'hidden': [1024]}}\" or model.<option>=value "
      "(options: {})",
      text, fmt::join(model_options(), ", ")));
}

struct FlagSpec {
  const char* flag;
  const char* help;
  Overrides (*to_overrides)(const std::string& text, const std::string& value);
};

// In the order of the paper's usage line.
const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table{
      {"--backend", "parallel.backend: auto | gloo | mpi | nccl",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("parallel.backend", v, t)};
       }},
      {"--lr", "optim.lr",
       [](const std::string& t, const std::string& v) -> Overrides { return {key("optim.lr", v, t)}; }},
      {"--batch-size", "data.batch_size, per worker",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("data.batch_size", v, t)};
       }},
      {"--epochs", "train.epochs",
       [](const std::string& t, const std::string& v) -> Overrides { return {key("train.epochs", v, t)}; }},
      {"--name", "name: the run folder is <log-dir>/<name>/ (with --log-dir or without CONFIG)",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("name", yaml_text(v), t)};
       }},
      {"--log-dir",
       "out_dir=DIR and run_folder=named: the run folder is DIR/<name>/ (default without CONFIG: logs)",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("out_dir", yaml_text(v), t), key("run_folder", "named", t)};
       }},
      {"--distributed-mode", "parallel.strategy (dsgd is data_parallel)",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("parallel.strategy", v, t)};
       }},
      {"--num-folds", "data.partition=kfold and data.num_folds",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("data.partition", "kfold", t), key("data.num_folds", v, t)};
       }},
      {"--model", "model.name",
       [](const std::string& t, const std::string& v) -> Overrides { return {key("model.name", v, t)}; }},
      {"--model-args", "not supported unless empty: dtrain's models take named options (--model-kwargs)",
       model_args},
      {"--model-kwargs", "a Python dict, e.g. \"{'hidden': [1024]}\": each key is model.<key>", model_kwargs},
      {"--dataset", "data.dataset",
       [](const std::string& t, const std::string& v) -> Overrides { return {key("data.dataset", v, t)}; }},
      {"--criterion", "optim.loss",
       [](const std::string& t, const std::string& v) -> Overrides { return {key("optim.loss", v, t)}; }},
      {"--optimizer", "optim.name",
       [](const std::string& t, const std::string& v) -> Overrides { return {key("optim.name", v, t)}; }},
      {"--scheduler", "optim.scheduler.name",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("optim.scheduler.name", v, t)};
       }},
      {"--k", "data.partition=kfold and data.fold, the held-out fold in [0, num-folds)",
       [](const std::string& t, const std::string& v) -> Overrides {
         return {key("data.partition", "kfold", t), key("data.fold", v, t)};
       }},
      {"--N", "data.subset_size: training samples to use, -1 for all", training_size},
  };
  return table;
}

const FlagSpec& spec_of(const std::string& flag) {
  for (const auto& spec : flag_table()) {
    if (flag == spec.flag) return spec;
  }
  throw std::logic_error("no seed flag " + flag);
}

// Whether two dotted keys name the same setting, or one is a section holding the other.
bool overlap(const std::string& a, const std::string& b) {
  return a == b || a.rfind(b + ".", 0) == 0 || b.rfind(a + ".", 0) == 0;
}

}  // namespace

void DadFlags::add_to(CLI::App& cmd) {
  for (const auto& spec : flag_table()) {
    const std::string flag = spec.flag;
    cmd.add_option_function<std::string>(
           flag, [this, flag](const std::string& value) { set(flag, value); }, spec.help)
        ->group("The dAD paper's flags (each an override of the keys it names)");
  }
}

void DadFlags::set(const std::string& flag, const std::string& value) {
  spec_of(flag);
  given_.emplace_back(flag, value);
}

std::vector<config::Override> DadFlags::overrides() const {
  // In table order, whatever the order on the command line: the keys they set do not overlap, but
  // for --num-folds and --k, which agree on data.partition.
  Overrides out;
  for (const auto& spec : flag_table()) {
    for (const auto& [flag, value] : given_) {
      if (flag != spec.flag) continue;
      const auto text = flag + " " + value;
      for (auto& o : spec.to_overrides(text, value)) out.push_back(std::move(o));
    }
  }
  return out;
}

void check_no_conflict(const std::vector<config::Override>& flags,
                       const std::vector<config::Override>& overrides) {
  for (const auto& f : flags) {
    for (const auto& o : overrides) {
      if (!overlap(f.key, o.key)) continue;
      throw std::invalid_argument(
          fmt::format("{} sets {}, and so does {}; give one of them", f.text, f.key, config::origin_of(o)));
    }
  }
}

}  // namespace dtrain::cli
