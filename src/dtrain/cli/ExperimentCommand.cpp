// `dtrain experiment FILE.yaml`: several runs side by side from one base configuration, or DiNNO's
// experiment file (experiment: / problem_configs:); an interrupted experiment
// continues where it stopped when the same command is run again.
#include <torch/cuda.h>

#include <iostream>

#include "dtrain/cli/Commands.h"
#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/Experiment.h"
#include "dtrain/experiment/Report.h"
#include "dtrain/run/SelfExe.h"

namespace dtrain::cli {
namespace {

struct ExperimentArgs {
  std::string file;
  std::string dir;
  bool fresh = false;
  bool oversubscribe = false;
  int nproc = 0;
  std::vector<std::string> sets;
};

// What DiNNO's form says besides its result files: the CPU fall-back of use_cuda, and the solo
// run's accuracies when individual_training.verbose is true.
void dinno_notes_before(const experiment::DinnoForm& form) {
  const auto note = experiment::cuda_note(form.use_cuda, torch::cuda::is_available());
  if (!note.empty()) std::cerr << note << "\n";
}

void dinno_notes_after(const experiment::DinnoForm& form, const nlohmann::json& results) {
  if (form.solo_verbose && results.contains("solo_results"))
    std::cerr << experiment::solo_lines(results["solo_results"]);
}

}  // namespace

Run add_experiment_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("experiment", "Run an experiment: named runs and sweeps from one base config");
  auto a = std::make_shared<ExperimentArgs>();
  cmd->add_option("file", a->file,
                  "Experiment YAML (base, runs, sweep; or DiNNO's experiment, problem_configs)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--dir", a->dir, "Continue or write this experiment folder");
  cmd->add_flag("--fresh", a->fresh, "Start a new folder even when an unfinished one exists");
  cmd->add_option("--nproc", a->nproc, "Workers of every run (nproc=N after the file's overrides)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--oversubscribe", a->oversubscribe,
                "Let runs start more local workers than 4 per core (at least 16), the bound without it");
  cmd->add_option("--set", a->sets, "key=value for every run, after the file's overrides (repeatable)");
  return [a] {
    auto spec = experiment::load_experiment(a->file);
    spec.final_overrides = a->sets;
    if (a->nproc > 0) spec.final_overrides.push_back("nproc=" + std::to_string(a->nproc));
    if (spec.dinno_form) dinno_notes_before(*spec.dinno_form);
    experiment::ExperimentOptions options;
    options.dtrain_executable = run::self_executable();
    options.directory = a->dir;
    options.fresh = a->fresh;
    options.oversubscribe = a->oversubscribe;
    const auto results = experiment::run_experiment(spec, options);
    if (spec.dinno_form) dinno_notes_after(*spec.dinno_form, results);
    if (results.value("written", true)) {
      const auto report = experiment::write_report(results["directory"].get<std::string>());
      std::cerr << "dtrain experiment: report " << report.string() << "\n";
      std::cerr << "dtrain experiment: " << results["runs"].size() << " runs in "
                << results["directory"].get<std::string>() << "\n";
    }
    std::cout << results.dump() << std::endl;
    return kExitSuccess;
  };
}

Run add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report",
                                 "Write report.md and report.html (plots embedded) for a run or experiment");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("dir", *dir, "A run folder or an experiment folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  return [dir] {
    const auto report = experiment::write_report(*dir);
    std::cout << report.string() << "\n";
    return kExitSuccess;
  };
}

}  // namespace dtrain::cli
