// run_experiment: every run checked before the first starts, run one after another through
// `dtrain train` (each in its own folder, continued from its checkpoint when interrupted), then
// checked to be comparable and summarised in the experiment's results.json.
#include "dtrain/experiment/Experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "dtrain/config/Environment.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/experiment/ExperimentChecks.h"
#include "dtrain/experiment/ScratchFolder.h"
#include "dtrain/experiment/SeedExperiment.h"
#include "dtrain/experiment/WorkerLaunch.h"
#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/io/RunDir.h"
#include "dtrain/launch/Launcher.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

bool finished(const fs::path& run_dir) {
  return fs::exists(run_dir / "results.json");
}

// Every run's configuration, loaded before the first one starts; an error names the run.
std::vector<config::RunConfig> load_configs(const ExperimentSpec& spec, const std::vector<RunSpec>& runs) {
  std::vector<config::RunConfig> configs;
  for (const auto& run : runs) {
    try {
      // Without a base file (DiNNO's form) the overrides alone make the configuration.
      configs.push_back(spec.base.empty() ? config::parse_run_config("{}", "(no base file)", run.overrides)
                                          : config::load_run_config(spec.base.string(), run.overrides));
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("experiment run '{}': {}", run.name, e.what()));
    }
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

// `dtrain train <base> <overrides> --run-dir <run_dir>` on cfg.nproc workers; an interrupted run
// continues from its last checkpoint. Throws naming the run when it fails.
void train(const ExperimentSpec& spec, const ExperimentOptions& options, const RunSpec& run,
           const config::RunConfig& cfg, const fs::path& run_dir, const comm::Environment& environment) {
  auto job = worker_launch(cfg, cfg.nproc, run_dir, environment);
  job.oversubscribe = options.oversubscribe;
  job.output_fd = 2;  // the runs' result lines stay off the experiment's stdout
  const bool interrupted = fs::exists(run_dir / "checkpoints" / "latest");
  job.command = train_command(options.dtrain_executable, spec.base.string(), run.overrides, run_dir,
                              interrupted ? run_dir.string() : "");
  const auto result = launch::launch(job);
  if (result.exit_code != 0) {
    throw std::runtime_error(fmt::format("experiment run '{}' failed with exit code {}: {}", run.name,
                                         result.exit_code, result.failure));
  }
}

nlohmann::json run_entry(const RunSpec& run, bool skipped, const fs::path& run_dir) {
  nlohmann::json entry;
  entry["name"] = run.name;
  entry["overrides"] = run.overrides;
  entry["skipped"] = skipped;
  entry["results"] = io::read_json_file(run_dir / "results.json");
  return entry;
}

// Every run (their configurations loaded already), then the checks; the experiment's results.json
// in dir.
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
    if (!skipped) train(spec, options, runs[i], configs[i], run_dir, environment);
    all["runs"].push_back(run_entry(runs[i], skipped, run_dir));
    finished_runs.push_back({runs[i].name, configs[i], all["runs"].back()["results"]});
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

nlohmann::json run_experiment(const ExperimentSpec& spec, const ExperimentOptions& options) {
  // Every run's configuration is checked before anything is made.
  const auto runs = expand_runs(spec);
  const auto configs = load_configs(spec, runs);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    try {
      launch::check_local_workers(configs[i].nproc, options.oversubscribe);
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("experiment run '{}': nproc: {}", runs[i].name, e.what()));
    }
  }
  if (!spec.seed_form) return run_all(spec, options, runs, configs, experiment_folder(spec, options));
  const auto& form = *spec.seed_form;
  if (!form.writeout) {
    ScratchFolder scratch("dtrain-experiment-", "experiment");
    auto all = run_all(spec, options, runs, configs, scratch.path());
    all["problem_results"] = write_seed_results(form, scratch.path());
    if (all["problem_results"].contains("solo")) all["solo_results"] = all["problem_results"]["solo"];
    all["directory"] = "";
    all["written"] = false;
    return all;
  }
  auto all = run_all(spec, options, runs, configs, experiment_folder(spec, options));
  const auto seed = write_seed_results(form, all["directory"].get<std::string>());
  if (seed.contains("solo")) all["solo_results"] = seed["solo"];
  all["written"] = true;
  return all;
}

}  // namespace dtrain::experiment
