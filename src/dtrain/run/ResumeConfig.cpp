// See ResumeConfig.h, Note [What a resume may change].
#include "dtrain/run/ResumeConfig.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <stdexcept>

#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "dtrain/run/RunFolder.h"

namespace dtrain::run {
namespace {

// Keys (or, ending in '.', sections) a resume may change. name, out_dir and run_folder decide where
// a new run's folder goes; a resume continues in its own, so they change nothing.
const std::vector<std::string> kResumable{"name",
                                          "out_dir",
                                          "run_folder",
                                          "nproc",
                                          "train.epochs",
                                          "train.max_steps",
                                          "train.eval_every_steps",
                                          "train.eval_every_epochs",
                                          "train.eval_at_start",
                                          "train.log_evals",
                                          "train.log_every_steps",
                                          "train.target_accuracy",
                                          "train.checkpoint_every_steps",
                                          "train.checkpoint_every_epochs",
                                          "train.keep_checkpoints",
                                          "train.threads",
                                          "train.device",
                                          "train.precision",
                                          "train.sync_every_step",
                                          "train.cudnn_benchmark",
                                          "train.float32_matmul_precision",
                                          "train.cuda_graph",
                                          "train.activation_checkpointing",
                                          "train.activation_checkpointing_every",
                                          "data.loader_threads",
                                          "data.prefetch",
                                          "data.eval_batch_size",
                                          "model.init_from",
                                          "parallel."};

bool resumable(const std::string& key) {
  return std::any_of(kResumable.begin(), kResumable.end(), [&](const std::string& allowed) {
    return allowed.back() == '.' ? key.rfind(allowed, 0) == 0 : key == allowed;
  });
}

void flatten(const nlohmann::json& value, const std::string& prefix,
             std::map<std::string, nlohmann::json>& out) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items())
      flatten(child, prefix.empty() ? key : prefix + "." + key, out);
    return;
  }
  out[prefix] = value;
}

std::map<std::string, nlohmann::json> flat(const config::RunConfig& config) {
  std::map<std::string, nlohmann::json> out;
  flatten(config::to_json(config), "", out);
  return out;
}

std::string text(const nlohmann::json& value) {
  return value.is_null() ? "(not set)" : value.dump();
}

// The strategy `overrides` choose, canonical, or "" where they choose none.
std::string strategy_chosen(const std::vector<config::Override>& overrides) {
  std::string chosen;
  for (const auto& o : overrides) {
    if (o.key != config::kStrategyKey || o.remove) continue;
    try {
      const auto node = YAML::Load(o.value);
      if (!node.IsScalar()) continue;
      const auto* choice = config::registered_choices(config::kStrategyKey).find(node.as<std::string>());
      chosen = choice ? choice->name : "";
    } catch (const YAML::Exception&) {
      chosen.clear();  // the reader names the malformed value itself
    }
  }
  return chosen;
}

// Note [A resume under another strategy]
// A run folder's config.yaml holds the sections of the strategy that ran, its defaults written out
// (parallel.data_parallel: {bucket_mb: 25, ...}). A resume from it that chooses another strategy
// (`--resume DIR parallel.strategy=local`) would be refused for a section the user never wrote, so
// the saved sections the chosen strategy does not read are taken out first, as `parallel.<name>=null`
// on the command line would; a section this resume's own overrides give is still checked.
std::vector<config::Override> without_unread_sections(const std::vector<config::Override>& overrides) {
  const auto strategy = strategy_chosen(overrides);
  if (strategy.empty()) return overrides;
  const auto* chosen = config::registered_choices(config::kStrategyKey).find(strategy);
  std::vector<config::Override> out;
  for (const auto& [name, make] : config::registered_sections("parallel")) {
    if (std::find(chosen->sections.begin(), chosen->sections.end(), name) != chosen->sections.end()) continue;
    config::Override removal;
    removal.key = "parallel." + name;
    removal.text = "~parallel." + name;
    removal.remove = true;
    out.push_back(removal);
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

}  // namespace

std::filesystem::path saved_config_path(const std::filesystem::path& run_folder) {
  return run_folder / "config.yaml";
}

config::RunConfig load_run_config(const std::string& config_file,
                                  const std::vector<config::Override>& overrides, const std::string& resume,
                                  const std::string& default_text, const std::string& default_source) {
  const auto resumed = resumed_run_folder(resume);
  if (!resumed) {
    if (config_file.empty()) return config::run_config_from_text(default_text, default_source, overrides);
    return config::run_config_from_file(config_file, overrides);
  }
  const auto saved_path = saved_config_path(*resumed);
  const auto cfg = config_file.empty()
                       ? config::run_config_from_file(saved_path.string(), without_unread_sections(overrides))
                       : config::run_config_from_file(config_file, overrides);
  (void)resume_changes(config::run_config_from_file(saved_path.string(), {}), cfg, saved_path);
  return cfg;
}

std::vector<ResumeChange> resume_changes(const config::RunConfig& saved, const config::RunConfig& config,
                                         const std::filesystem::path& saved_path) {
  const auto before = flat(saved);
  const auto after = flat(config);
  std::vector<std::string> keys;
  for (const auto& [key, value] : before) keys.push_back(key);
  for (const auto& [key, value] : after) {
    if (!before.count(key)) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<ResumeChange> changes;
  for (const auto& key : keys) {
    const auto was = before.count(key) ? before.at(key) : nlohmann::json();
    const auto now = after.count(key) ? after.at(key) : nlohmann::json();
    if (was == now) continue;
    if (!resumable(key)) {
      throw std::invalid_argument(fmt::format(
          "--resume: {} is {} in the run's {}, {} here; a resumed run keeps its model, data, optimizer and "
          "seed "
          "(it may change epochs and steps, logging, evaluation and checkpoint cadence, workers, strategy, "
          "backend, device and precision); start a new run, from these weights with model.init_from, to "
          "change it",
          key, text(was), saved_path.string(), text(now)));
    }
    changes.push_back({key, was, now});
  }
  return changes;
}

std::string describe(const std::vector<ResumeChange>& changes) {
  if (changes.empty()) return "no setting changed";
  std::string out;
  for (const auto& c : changes)
    out += fmt::format("{}{} {} -> {}", out.empty() ? "" : ", ", c.key, text(c.was), text(c.now));
  return out;
}

void record_resume(const std::filesystem::path& run_folder, const std::string& checkpoint, std::int64_t step,
                   const std::vector<ResumeChange>& changes) {
  nlohmann::json line;
  line["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  line["checkpoint"] = checkpoint;
  line["step"] = step;
  line["changes"] = nlohmann::json::object();
  for (const auto& c : changes) line["changes"][c.key] = {{"was", c.was}, {"now", c.now}};
  std::ofstream out(run_folder / "resumes.jsonl", std::ios::app);
  out << line.dump() << "\n";
  if (!out) {
    throw std::runtime_error(fmt::format("cannot append to {}", (run_folder / "resumes.jsonl").string()));
  }
}

}  // namespace dtrain::run
