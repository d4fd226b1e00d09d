// The experiment file (name, out_dir, base, overrides, runs, sweep) read into an ExperimentSpec, and
// the spec expanded into the runs it stands for; a file in DiNNO's form goes to
// read_dinno_experiment. Errors name file:line and the key.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/YamlFile.h"
#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/DinnoSection.h"
#include "dtrain/experiment/Experiment.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void reject(const std::string& source, const YAML::Node& node, const std::string& key,
                         const std::string& message) {
  throw config::ConfigError(config::yaml_location(source, node), key,
                            key.empty() ? message : key + ": " + message);
}

std::string scalar(const std::string& source, const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar()) reject(source, node, key, "expected a string");
  return node.as<std::string>();
}

std::vector<std::string> strings(const std::string& source, const YAML::Node& node, const std::string& key) {
  if (!node.IsSequence())
    reject(source, node, key, "expected a list of key=value overrides, e.g. [optim.lr=0.1]");
  std::vector<std::string> out;
  for (const auto& item : node) out.push_back(scalar(source, item, key));
  return out;
}

// YAML text of a sweep value, as an override's right-hand side.
std::string value_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// Keeps folder names portable: letters, digits and . _ = , - only.
std::string folder_safe(const std::string& text) {
  std::string out = text;
  for (auto& c : out) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '=' || c == ',' ||
          c == '-')) {
      c = '_';
    }
  }
  return out;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot read the experiment file", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// One entry of `runs`: {name, overrides}, its name folder-safe and not among `earlier`.
RunSpec read_run(const std::string& source, const YAML::Node& run, const std::vector<RunSpec>& earlier) {
  if (!run.IsMap() || !run["name"])
    reject(source, run, "runs", "each run needs a name (and optionally overrides)");
  RunSpec r;
  for (const auto& field : run) {
    const auto f = config::key_text(source, field.first, "runs");
    if (f == "name") {
      r.name = scalar(source, field.second, "runs.name");
    } else if (f == "overrides") {
      r.overrides = strings(source, field.second, "runs.overrides");
    } else {
      reject(source, field.first, "runs." + f, "unknown key; a run has name and overrides");
    }
  }
  if (!is_folder_name(r.name)) {
    reject(source, run["name"], "runs.name",
           "expected a name of letters, digits, '.', '_', '=', ',' or '-', not . or .. (it names the run's "
           "folder)");
  }
  for (const auto& other : earlier) {
    if (other.name == r.name) reject(source, run["name"], "runs.name", "duplicate run name '" + r.name + "'");
  }
  return r;
}

// The entries of `runs`, after those already read.
void read_runs(const std::string& source, const YAML::Node& value, std::vector<RunSpec>& runs) {
  if (!value.IsSequence()) reject(source, value, "runs", "expected a list of {name, overrides} entries");
  if (value.size() == 0) {
    reject(source, value, "runs",
           "an empty list; give at least one run, or leave runs out to run the base configuration once");
  }
  for (const auto& run : value) runs.push_back(read_run(source, run, runs));
}

std::vector<std::pair<std::string, std::vector<std::string>>> read_sweep(const std::string& source,
                                                                         const YAML::Node& value) {
  if (!value.IsMap()) reject(source, value, "sweep", "expected a mapping of dotted keys to lists of values");
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  for (const auto& entry : value) {
    const auto key = config::key_text(source, entry.first, "sweep");
    if (!entry.second.IsSequence() || entry.second.size() == 0) {
      reject(source, entry.second, "sweep." + key, "expected a non-empty list of values");
    }
    std::vector<std::string> values;
    for (const auto& v : entry.second) values.push_back(value_text(v));
    sweep.emplace_back(key, std::move(values));
  }
  return sweep;
}

// One top-level key of the file into `spec`.
void read_key(ExperimentSpec& spec, const std::string& source, const YAML::Node& key_node,
              const YAML::Node& value) {
  const auto key = config::key_text(source, key_node, "");
  if (key == "name") {
    spec.name = scalar(source, value, key);
    if (!is_folder_name(spec.name)) {
      reject(source, value, key,
             "expected a name of letters, digits, '.', '_', '=', ',' or '-', not . or .. (it names the "
             "experiment's folder inside out_dir)");
    }
  } else if (key == "out_dir") {
    spec.out_dir = scalar(source, value, key);
  } else if (key == "base") {
    spec.base = spec.source_path.parent_path() / scalar(source, value, key);
  } else if (key == "overrides") {
    spec.overrides = strings(source, value, key);
  } else if (key == "runs") {
    read_runs(source, value, spec.runs);
  } else if (key == "sweep") {
    spec.sweep = read_sweep(source, value);
  } else {
    reject(source, key_node, key,
           "unknown key; an experiment has name, out_dir, base, overrides, runs, sweep (or, in seed "
           "001's form, experiment and problem_configs)");
  }
}

// Every combination of the sweep's values, first key slowest.
std::vector<std::vector<std::pair<std::string, std::string>>> sweep_combinations(const ExperimentSpec& spec) {
  std::vector<std::vector<std::pair<std::string, std::string>>> combos{{}};
  for (const auto& [key, values] : spec.sweep) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& combo : combos) {
      for (const auto& v : values) {
        auto extended = combo;
        extended.emplace_back(key, v);
        next.push_back(std::move(extended));
      }
    }
    combos = std::move(next);
  }
  return combos;
}

}  // namespace

bool is_folder_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && folder_safe(name) == name;
}

namespace {

ExperimentSpec read_experiment(const fs::path& path) {
  ExperimentSpec spec;
  spec.source_path = path;
  spec.source_text = read_text(path);
  const std::string source = path.string();
  const YAML::Node root = config::load_yaml_file(source);
  if (is_dinno_form(root)) {
    read_dinno_experiment(spec, root);
    return spec;
  }
  if (!root.IsMap()) reject(source, root, "", "expected a mapping with base, runs and optionally sweep");
  bool has_base = false;
  for (const auto& item : root) {
    read_key(spec, source, item.first, item.second);
    has_base = has_base || config::key_text(source, item.first, "") == "base";
  }
  if (!has_base)
    reject(source, root, "base", "missing: the base run configuration, e.g. base: quickstart.yaml");
  return spec;
}

}  // namespace

ExperimentSpec load_experiment(const fs::path& path) {
  try {
    return read_experiment(path);
  } catch (const YAML::Exception& e) {
    // Every read above checks a node's kind before converting it; this names the file and line of
    // any conversion yaml-cpp still refuses, rather than its bare "bad conversion".
    const std::string where =
        e.mark.is_null() ? path.string() : path.string() + ":" + std::to_string(e.mark.line + 1);
    throw config::ConfigError(where, "", "a value of the wrong kind here (" + e.msg + ")");
  }
}

std::vector<RunSpec> expand_runs(const ExperimentSpec& spec) {
  std::vector<RunSpec> bases = spec.runs;
  if (bases.empty()) bases.push_back({"base", {}});
  const auto combos = sweep_combinations(spec);
  std::vector<RunSpec> runs;
  for (const auto& base : bases) {
    for (const auto& combo : combos) {
      RunSpec run;
      run.name = base.name;
      run.overrides = spec.overrides;
      run.overrides.insert(run.overrides.end(), base.overrides.begin(), base.overrides.end());
      std::string suffix;
      for (const auto& [k, v] : combo) {
        run.overrides.push_back(k + "=" + v);
        suffix += (suffix.empty() ? "" : ",") + k + "=" + v;
      }
      if (!suffix.empty()) run.name += "__" + folder_safe(suffix);
      run.overrides.insert(run.overrides.end(), spec.final_overrides.begin(), spec.final_overrides.end());
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

}  // namespace dtrain::experiment
