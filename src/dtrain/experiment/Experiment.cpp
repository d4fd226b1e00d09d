// run_experiment: every run checked before the first starts, run one after another through
// `dtrain train` or the caller's own workers (each in its own folder, continued from its checkpoint
// when interrupted), then checked to be comparable and summarised in the experiment's results.json.
#include "dtrain/experiment/Experiment.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>

#include "dtrain/config/Environment.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/ExperimentChecks.h"
#include "dtrain/experiment/ScratchFolder.h"
#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/FileDescriptor.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/io/RunDir.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/run/WorkerLaunch.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

// A run whose results.json says it failed is run again.
bool finished(const fs::path& run_dir) {
  const auto path = run_dir / "results.json";
  if (!fs::exists(path)) return false;
  const auto results = io::read_json_file(path);
  return !(results.is_object() && results.value("status", "") == "failed");
}

// Every run's configuration, loaded before the first one starts; an error names the run.
// A key of model.* that a run's model does not read is left out of that run, so that runs of
// several models can share their model keys (config::load_grid_run_config): the run's overrides
// gain its removal (`~model.patch`), which its workers read as the experiment did. A key that no
// run's model reads is refused, naming the first run given it.
std::vector<config::RunConfig> load_configs(const ExperimentSpec& spec, std::vector<RunSpec>& runs) {
  std::vector<config::RunConfig> configs;
  std::set<std::string> kept;
  struct LeftOut {
    std::string run, model;  // the first run it was left out of, and that run's model
  };
  std::map<std::string, LeftOut> left_out;
  for (auto& run : runs) {
    try {
      // Without a base file (DiNNO's form) the overrides alone make the configuration.
      config::GridModelKeys keys;
      configs.push_back(spec.base.empty()
                            ? config::parse_grid_run_config("{}", "(no base file)", run.overrides, keys)
                            : config::load_grid_run_config(spec.base.string(), run.overrides, keys));
      kept.insert(keys.kept.begin(), keys.kept.end());
      for (const auto& key : keys.left_out) {
        left_out.emplace(key, LeftOut{run.name, configs.back().model.name});
        run.overrides.push_back("~" + key);
      }
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("experiment run '{}': {}", run.name, e.what()));
    }
  }
  for (const auto& [key, first] : left_out) {
    if (kept.count(key)) continue;
    throw std::invalid_argument(fmt::format(
        "experiment run '{}': {}: {}; no run of the experiment has a model that reads it", first.run, key,
        config::model_key_unused(first.model, key.substr(std::string("model.").size()))));
  }
  return configs;
}

// The newest <out_dir>/*_<name> folder that has experiment.yaml but no complete results.json.
fs::path unfinished_folder(const fs::path& out_dir, const std::string& name) {
  if (!fs::is_directory(out_dir)) return {};
  std::vector<fs::path> candidates;
  const std::string suffix = "_" + name;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const auto folder = entry.path().filename().string();
    if (!entry.is_directory() || folder.size() <= suffix.size() ||
        folder.compare(folder.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    if (!fs::exists(entry.path() / "experiment.yaml")) continue;
    const auto results = entry.path() / "results.json";
    if (fs::exists(results) && io::read_json_file(results).value("complete", false)) continue;
    candidates.push_back(entry.path());
  }
  if (candidates.empty()) return {};
  return *std::max_element(candidates.begin(), candidates.end());
}

// The folder given, else the newest unfinished one (unless fresh), else a new dated one; created,
// with the experiment file saved in it.
fs::path experiment_folder(const ExperimentSpec& spec, const ExperimentOptions& options) {
  fs::path dir = options.directory;
  if (dir.empty() && !options.fresh) dir = unfinished_folder(spec.out_dir, spec.name);
  if (dir.empty())
    dir = fs::path(spec.out_dir) / io::run_folder_name(std::chrono::system_clock::now(), spec.name);
  fs::create_directories(dir);
  if (!fs::exists(dir / "experiment.yaml")) io::write_file_atomic(dir / "experiment.yaml", spec.source_text);
  return dir;
}

// The first line of a message, for a run's reason: LibTorch's errors and the launcher's account of
// a failing rank carry a stack trace or the tail of its log after it.
std::string one_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// Run `index`'s workers on cfg.nproc local processes: options.worker_command's, or `dtrain train
// <base> <overrides> --run-dir <run_dir>`, which continues from its last checkpoint when interrupted.
launch::LaunchResult launch_run(const ExperimentSpec& spec, const ExperimentOptions& options,
                                std::size_t index, const RunSpec& run, const config::RunConfig& cfg,
                                const fs::path& run_dir, const comm::Environment& environment) {
  auto job = run::worker_launch(cfg, cfg.nproc, run_dir, environment);
  job.oversubscribe = options.oversubscribe;
  job.output_fd = 2;  // the runs' result lines stay off the experiment's stdout
  if (options.worker_command) {
    job.command = options.worker_command(index, run, run_dir);
  } else {
    const bool interrupted = fs::exists(run_dir / "checkpoints" / "latest");
    job.command = run::train_command(options.dtrain_executable, spec.base.string(),
                                     worker_overrides(run, run_dir.parent_path()), run_dir,
                                     interrupted ? run_dir.string() : "");
  }
  if (!options.workers_output_to_file) return launch::launch(job);
  fs::create_directories(run_dir);
  const auto log_path = run_dir / "launch.log";
  // Closed when the launch that writes into it returns or throws.
  const io::FileDescriptor log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (log.get() < 0) {
    throw std::runtime_error(
        fmt::format("experiment run '{}': cannot write {}", run.name, log_path.string()));
  }
  job.output_fd = log.get();
  job.diagnostics_fd = log.get();
  job.status_line = false;
  return launch::launch(job);
}

// How a launched run ended: options.read_outcome's account, or its results.json. Without
// keep_going a run that is not ok throws, naming it.
RunOutcome outcome_of(const ExperimentOptions& options, std::size_t index, const RunSpec& run,
                      const fs::path& run_dir, const launch::LaunchResult& launched) {
  RunOutcome outcome;
  if (options.read_outcome) {
    outcome = options.read_outcome(index, run_dir, launched);
  } else if (launched.exit_code == 0) {
    outcome.results = io::read_json_file(run_dir / "results.json");
  } else if (!options.keep_going) {
    throw std::runtime_error(fmt::format("experiment run '{}' failed with exit code {}: {}", run.name,
                                         launched.exit_code, launched.failure));
  } else {
    outcome.status = "failed";
    outcome.reason = one_line(launched.failure);
  }
  if (outcome.status != "ok" && !options.keep_going) {
    throw std::runtime_error(
        fmt::format("experiment run '{}' {}: {}", run.name, outcome.status, outcome.reason));
  }
  return outcome;
}

// One run not finished yet. Under keep_going a run whose data holders cannot be spread over its
// workers is refused here: its workers would all refuse alike, and starting them costs seconds.
RunOutcome run_one(const ExperimentSpec& spec, const ExperimentOptions& options, std::size_t index,
                   const RunSpec& run, const config::RunConfig& cfg, const fs::path& run_dir,
                   const comm::Environment& environment) {
  if (options.keep_going) {
    try {
      parallel::data_holders(cfg.parallel, cfg.nproc);
    } catch (const std::invalid_argument& e) {
      RunOutcome refused;
      refused.status = "refused";
      refused.reason = one_line(e.what());
      return refused;
    }
  }
  return outcome_of(options, index, run, run_dir,
                    launch_run(spec, options, index, run, cfg, run_dir, environment));
}

// A run's entry in the experiment's results.json; status and reason only where runs may end
// otherwise than ok (keep_going).
nlohmann::json run_entry(const RunSpec& run, bool skipped, const RunOutcome& outcome, bool keep_going) {
  nlohmann::json entry;
  entry["name"] = run.name;
  entry["overrides"] = run.overrides;
  entry["skipped"] = skipped;
  if (keep_going) {
    entry["status"] = outcome.status;
    if (outcome.status != "ok") entry["reason"] = outcome.reason;
  }
  entry["results"] = outcome.results;
  return entry;
}

// Every run (their configurations loaded already), then the checks over the runs that ended ok;
// the experiment's results.json in dir.
nlohmann::json run_all(const ExperimentSpec& spec, const ExperimentOptions& options,
                       const std::vector<RunSpec>& runs, const std::vector<config::RunConfig>& configs,
                       const fs::path& dir) {
  nlohmann::json all;
  all["experiment"] = spec.name;
  all["directory"] = dir.string();
  all["base"] = spec.base.string();
  all["runs"] = nlohmann::json::array();
  const auto environment = config::process_environment();
  std::vector<FinishedRun> finished_runs;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const fs::path run_dir = dir / runs[i].name;
    const bool skipped = finished(run_dir);
    if (options.before_run) options.before_run(i, runs[i]);
    RunOutcome outcome;
    if (skipped) {
      outcome.results = io::read_json_file(run_dir / "results.json");
    } else {
      outcome = run_one(spec, options, i, runs[i], configs[i], run_dir, environment);
    }
    all["runs"].push_back(run_entry(runs[i], skipped, outcome, options.keep_going));
    if (outcome.status == "ok") finished_runs.push_back({runs[i].name, configs[i], outcome.results});
    if (options.after_run) options.after_run(i, runs[i], outcome);
  }
  check_initial_weights(finished_runs);
  check_data_partitions(finished_runs);
  all["initial_weights_identical"] = true;
  all["data_partitions_identical"] = true;
  all["complete"] = true;
  io::write_json_file(dir / "results.json", all);
  return all;
}

}  // namespace

std::vector<std::string> worker_overrides(const RunSpec& run, const fs::path& experiment_dir) {
  auto overrides = run.overrides;
  // Quoted where YAML would read the path as something else (a ": " or a leading "[" in it).
  YAML::Emitter out_dir;
  out_dir << experiment_dir.string();
  overrides.push_back(std::string("out_dir=") + out_dir.c_str());
  return overrides;
}

nlohmann::json run_experiment(const ExperimentSpec& spec, const ExperimentOptions& options) {
  // Every run's configuration is checked before anything is made.
  auto runs = expand_runs(spec);
  const auto configs = load_configs(spec, runs);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    try {
      launch::check_local_workers(configs[i].nproc, options.oversubscribe);
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("experiment run '{}': nproc: {}", runs[i].name, e.what()));
    }
  }
  if (!spec.dinno_form) return run_all(spec, options, runs, configs, experiment_folder(spec, options));
  const auto& form = *spec.dinno_form;
  if (!form.writeout) {
    ScratchFolder scratch("dtrain-experiment-", "experiment");
    auto all = run_all(spec, options, runs, configs, scratch.path());
    all["problem_results"] = write_dinno_results(form, scratch.path());
    if (all["problem_results"].contains("solo")) all["solo_results"] = all["problem_results"]["solo"];
    all["directory"] = "";
    all["written"] = false;
    return all;
  }
  auto all = run_all(spec, options, runs, configs, experiment_folder(spec, options));
  const auto seed = write_dinno_results(form, all["directory"].get<std::string>());
  if (seed.contains("solo")) all["solo_results"] = seed["solo"];
  all["written"] = true;
  return all;
}

}  // namespace dtrain::experiment
