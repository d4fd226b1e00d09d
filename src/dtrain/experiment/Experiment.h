// An experiment: one base configuration, a list of named runs (each a set of dotted overrides) and
// an optional sweep (the cartesian product of listed values, as in seed 003's model x batch x
// precision x workers tables). Every run starts from the same seed, so the same initial weights
// and the same data partition; the initial-parameter hash each run records is checked to agree.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtrain::experiment {

struct RunSpec {
  std::string name;                    // folder name inside the experiment folder
  std::vector<std::string> overrides;  // applied after the experiment's common overrides
};

struct ExperimentSpec {
  std::string name = "experiment";
  std::string out_dir = "runs";        // <out_dir>/<YYYYmmdd-HHMMSS>_<name>/
  std::filesystem::path base;          // the base run configuration (YAML)
  std::vector<std::string> overrides;  // for every run
  std::vector<RunSpec> runs;           // empty = one run named "base"
  // key -> values (YAML text), in file order; every combination becomes a run.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  std::string source_text;  // the file as given, saved into the experiment folder
  std::filesystem::path source_path;
};

// Reads an experiment file. `base` is relative to the file's folder. Errors name file:line and key.
ExperimentSpec load_experiment(const std::filesystem::path& path);

// Runs x sweep combinations, each with its full override list, in execution order. Run names
// are "<run>" or "<run>/<key>=<value>,..." made filesystem-safe.
std::vector<RunSpec> expand_runs(const ExperimentSpec& spec);

struct ExperimentOptions {
  std::string dtrain_executable;    // the binary that runs `dtrain train`
  std::filesystem::path directory;  // "" = a new dated folder, or the newest unfinished one
  bool fresh = false;               // never continue an unfinished folder
};

// Runs every run not finished yet (a run is finished when its results.json exists), one after
// another, then writes results.json for all runs. Throws when a run fails (naming it and its exit
// code) or when runs that share a model started from different weights.
nlohmann::json run_experiment(const ExperimentSpec& spec, const ExperimentOptions& options);

}  // namespace dtrain::experiment
