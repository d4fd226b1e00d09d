// An experiment: one base configuration, a list of named runs (each a set of dotted overrides) and
// an optional sweep (the cartesian product of listed values, as in the Horovod/FSDP/pipeline study's model
// x batch x precision x workers tables). Every run starts from the same seed, so the same initial weights
// and the same data partition; the initial-parameter hash each run records is checked to agree.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/launch/Launcher.h"

namespace dtrain::experiment {

struct RunSpec {
  std::string name;                    // folder name inside the experiment folder
  std::vector<std::string> overrides;  // applied after the experiment's common overrides
};

// One problem of an experiment file in DiNNO's form: the run that trains it, and the metrics its
// <problem_name>_results.json holds (forward_pass_count, validation_loss, consensus_error,
// top1_accuracy, current_epoch).
struct DinnoProblem {
  std::string name;  // problem_name: also the run's folder
  std::vector<std::string> metrics;
};

// What an experiment file in DiNNO's form (its experiment: and problem_configs:) asks for
// beyond its runs. See DinnoExperiment.h for the translation.
struct DinnoForm {
  int nodes = 0;  // experiment.graph.num_nodes
  std::vector<DinnoProblem> problems;
  bool solo = false;          // individual_training.train_solo: a run named "solo" before the problems
  bool solo_verbose = false;  // individual_training.verbose: print each node's validation accuracy
  bool writeout = true;       // false: run in a temporary folder, results on stdout only
  bool use_cuda = false;
};

struct ExperimentSpec {
  std::string name = "experiment";
  std::string out_dir = "runs";        // <out_dir>/<YYYYmmdd-HHMMSS>_<name>/
  std::filesystem::path base;          // the base run configuration (YAML); "" = none (DiNNO's form)
  std::vector<std::string> overrides;  // for every run
  std::vector<RunSpec> runs;           // empty = one run named "base"
  // key -> values (YAML text), in file order; every combination becomes a run.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  // For every run after everything the file says (dtrain experiment --nproc and --set).
  std::vector<std::string> final_overrides;
  std::string source_text;  // the file as given, saved into the experiment folder
  std::filesystem::path source_path;
  std::optional<DinnoForm> dinno_form;  // set when the file is in DiNNO's form
};

// Reads an experiment file, in dtrain's form (name, out_dir, base, overrides, runs, sweep; `base` is
// relative to the file's folder) or in DiNNO's (experiment, problem_configs; DinnoExperiment.h).
// Errors name file:line and key.
ExperimentSpec load_experiment(const std::filesystem::path& path);

// A name that can be one folder inside out_dir: letters, digits, '.', '_', '=', ',' or '-', and
// neither . nor .. (which would name out_dir itself or its parent).
bool is_folder_name(const std::string& name);

// Runs x sweep combinations, each with its full override list, in execution order. Run names
// are "<run>" or "<run>/<key>=<value>,..." made filesystem-safe.
std::vector<RunSpec> expand_runs(const ExperimentSpec& spec);

// The overrides `dtrain train` gets for a run whose folder is <experiment_dir>/<run.name>: the run's
// own, then out_dir=<experiment_dir>. The workers write into that folder (--run-dir) whatever
// out_dir says, so without it the config.yaml a run records would name another place: the base
// file's out_dir, or for a file in DiNNO's form (no base file) the dAD paper's default, logs.
std::vector<std::string> worker_overrides(const RunSpec& run, const std::filesystem::path& experiment_dir);

// How one run ended.
struct RunOutcome {
  std::string status = "ok";  // ok | refused (its configuration or strategy said no) | failed
  std::string reason;         // one line, when not ok
  nlohmann::json results;     // what the run reported: its results.json for `dtrain train`
};

// Everything past the first four fields is for a caller that runs its own workers, as
// `dtrain bench throughput` does; left at their defaults, every run is a `dtrain train` and the
// first one that fails ends the experiment.
struct ExperimentOptions {
  std::string dtrain_executable;    // the binary that runs `dtrain train`
  std::filesystem::path directory;  // "" = a new dated folder, or the newest unfinished one
  bool fresh = false;               // never continue an unfinished folder
  bool oversubscribe = false;       // launch::LaunchOptions::oversubscribe for every run

  // The workers' command line for run `index` (its folder: run_dir). Unset: `dtrain train` with
  // the run's overrides (train_command), continued from its checkpoint when interrupted.
  std::function<std::vector<std::string>(std::size_t index, const RunSpec& run,
                                         const std::filesystem::path& run_dir)>
      worker_command;
  // How run `index` ended, read once its workers have exited (`launched`: how they exited). Unset:
  // ok with the run's results.json when every worker exited 0, else failed with the launcher's
  // first line about the failing rank.
  std::function<RunOutcome(std::size_t index, const std::filesystem::path& run_dir,
                           const launch::LaunchResult& launched)>
      read_outcome;
  // false: a run that is not ok ends the experiment with an error naming it. true: its status and
  // reason go into its entry of results.json and the next run starts; the checks that runs started
  // alike leave it out. A run whose data holders (graph nodes) its strategy cannot spread over
  // its workers is then refused before any worker starts (parallel::data_holders says why).
  bool keep_going = false;
  // The workers' output and the launcher's reports into <run_dir>/launch.log instead of stderr,
  // with no status line: for a caller whose own stderr is a table.
  bool workers_output_to_file = false;
  // Called before run `index` starts and after it ended (a run finished earlier included), in
  // run order: progress lines, and a caller's results printed as each run completes.
  std::function<void(std::size_t index, const RunSpec& run)> before_run;
  std::function<void(std::size_t index, const RunSpec& run, const RunOutcome& outcome)> after_run;
};

// Runs every run not finished yet (a run is finished when its results.json exists), one after
// another, then writes results.json for all runs (and, for DiNNO's form, the per-problem
// results; with writeout: false everything happens in a temporary folder, removed at the end, and
// the returned document holds the problems' results under "problem_results"; the solo run's are
// under "solo_results" either way). Throws when a run fails (naming it and its exit code), unless
// options.keep_going, or when runs that share a model started from different weights.
nlohmann::json run_experiment(const ExperimentSpec& spec, const ExperimentOptions& options);

}  // namespace dtrain::experiment
