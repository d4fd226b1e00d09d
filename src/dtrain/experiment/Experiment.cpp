// run_experiment: every run checked before the first starts, run one after another through
// `dtrain train`, then checked to be comparable and summarised in the experiment's results.json.
#include "dtrain/experiment/Experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "dtrain/comm/Launcher.h"
#include "dtrain/config/Environment.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/io/RunDir.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

bool finished(const fs::path& run_dir) {
  return fs::exists(run_dir / "results.json");
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

}  // namespace

nlohmann::json run_experiment(const ExperimentSpec& spec, const ExperimentOptions& options) {
  const auto runs = expand_runs(spec);
  // Every run's configuration is checked before the first one starts.
  std::vector<config::RunConfig> configs;
  for (const auto& run : runs) {
    try {
      configs.push_back(config::load_run_config(spec.base.string(), run.overrides));
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format("experiment run '{}': {}", run.name, e.what()));
    }
  }

  fs::path dir = options.directory;
  if (dir.empty() && !options.fresh) dir = unfinished_folder(spec.out_dir, spec.name);
  if (dir.empty())
    dir = fs::path(spec.out_dir) / io::run_folder_name(std::chrono::system_clock::now(), spec.name);
  fs::create_directories(dir);
  if (!fs::exists(dir / "experiment.yaml")) io::write_file_atomic(dir / "experiment.yaml", spec.source_text);

  nlohmann::json all;
  all["experiment"] = spec.name;
  all["directory"] = dir.string();
  all["base"] = spec.base.string();
  all["runs"] = nlohmann::json::array();
  const auto environment = config::process_environment();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& run = runs[i];
    const auto& cfg = configs[i];
    const fs::path run_dir = dir / run.name;
    const bool skipped = finished(run_dir);
    if (!skipped) {
      comm::LaunchOptions launch;
      launch.nproc_per_node = cfg.nproc;
      launch.backend = cfg.parallel.backend == "mpi" ? "mpi" : "gloo";
      launch.threads = cfg.train.threads;
      launch.log_dir = (run_dir / "launch").string();
      launch.environment = environment;
      launch.output_fd = 2;  // the runs' result lines stay off the experiment's stdout
      launch.command = {options.dtrain_executable, "train", spec.base.string()};
      launch.command.insert(launch.command.end(), run.overrides.begin(), run.overrides.end());
      launch.command.insert(launch.command.end(), {"--run-dir", run_dir.string()});
      // An interrupted run continues from its last checkpoint.
      if (fs::exists(run_dir / "checkpoints" / "latest")) {
        launch.command.insert(launch.command.end(), {"--resume", run_dir.string()});
      }
      const auto result = comm::launch(launch);
      if (result.exit_code != 0) {
        throw std::runtime_error(fmt::format("experiment run '{}' failed with exit code {}: {}", run.name,
                                             result.exit_code, result.failure));
      }
    }
    nlohmann::json entry;
    entry["name"] = run.name;
    entry["overrides"] = run.overrides;
    entry["skipped"] = skipped;
    entry["results"] = io::read_json_file(run_dir / "results.json");
    all["runs"].push_back(std::move(entry));
  }

  // Runs with the same model must have started from the same weights.
  std::map<std::string, std::pair<std::string, std::string>> first_hash;  // model -> (hash, run)
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto model = config::to_json(configs[i])["model"].dump() + configs[i].data.dataset;
    const auto hash = all["runs"][i]["results"].value("initial_parameter_hash", "");
    auto [it, inserted] = first_hash.emplace(model, std::make_pair(hash, runs[i].name));
    if (!inserted && it->second.first != hash) {
      throw std::runtime_error(
          fmt::format("experiment: runs '{}' and '{}' use the same model but started from different weights "
                      "({} against {}); "
                      "give them the same train.seed",
                      it->second.second, runs[i].name, it->second.first, hash));
    }
  }
  // Runs with the same data, partition settings, seed and number of workers must have split the
  // training set the same way.
  std::map<std::string, std::pair<std::string, std::string>> first_partition;  // key -> (hash, run)
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto data = config::to_json(configs[i])["data"];
    for (const char* key : {"batch_size", "eval_batch_size", "drop_last", "normalize", "random_crop_padding",
                            "horizontal_flip", "loader_threads", "prefetch", "test_subset_size"}) {
      data.erase(key);
    }
    const auto& results = all["runs"][i]["results"];
    const auto key = data.dump() + "/" + std::to_string(configs[i].train.seed) + "/" +
                     std::to_string(results.value("world_size", 1));
    const auto hash = results.value("data_partition_hash", "");
    auto [it, inserted] = first_partition.emplace(key, std::make_pair(hash, runs[i].name));
    if (!inserted && it->second.first != hash) {
      throw std::runtime_error(
          fmt::format("experiment: runs '{}' and '{}' have the same data, seed and workers but split the "
                      "training set differently ({} against {})",
                      it->second.second, runs[i].name, it->second.first, hash));
    }
  }
  all["initial_weights_identical"] = true;
  all["data_partitions_identical"] = true;
  all["complete"] = true;
  io::write_json_file(dir / "results.json", all);
  return all;
}

}  // namespace dtrain::experiment
