// `dtrain experiment FILE.yaml`: several runs side by side from one base configuration; an
// interrupted experiment continues where it stopped when the same command is run again.
#include <iostream>

#include "dtrain/cli/Commands.h"
#include "dtrain/cli/SelfExe.h"
#include "dtrain/experiment/Experiment.h"
#include "dtrain/experiment/Report.h"

namespace dtrain::cli {

Run add_experiment_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("experiment", "Run an experiment: named runs and sweeps from one base config");
  struct Args {
    std::string file;
    std::string dir;
    bool fresh = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("file", a->file, "Experiment YAML (base, runs, sweep)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--dir", a->dir, "Continue or write this experiment folder");
  cmd->add_flag("--fresh", a->fresh, "Start a new folder even when an unfinished one exists");
  return [a] {
    const auto spec = experiment::load_experiment(a->file);
    experiment::ExperimentOptions options;
    options.dtrain_executable = self_executable();
    options.directory = a->dir;
    options.fresh = a->fresh;
    const auto results = experiment::run_experiment(spec, options);
    const auto report = experiment::write_report(results["directory"].get<std::string>());
    std::cerr << "dtrain experiment: report " << report.string() << "\n";
    std::cerr << "dtrain experiment: " << results["runs"].size() << " runs in "
              << results["directory"].get<std::string>() << "\n";
    std::cout << results.dump() << std::endl;
    return 0;
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
    return 0;
  };
}

}  // namespace dtrain::cli
