// dtrain: one tool for every strategy. `dtrain --help` lists the subcommands; every one exits with
// the statuses of Note [Exit codes].
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "dtrain/cli/Commands.h"
#include "dtrain/util/Allocator.h"

int main(int argc, char** argv) {
  namespace cli = dtrain::cli;
  dtrain::util::keep_freed_memory();  // Note [Keeping freed memory]
  CLI::App app{"dtrain: distributed neural-network training on LibTorch"};
  app.require_subcommand(1);
  std::map<std::string, cli::Run> runs;
  runs["info"] = cli::add_info_command(app);
  runs["launch"] = cli::add_launch_command(app);
  runs["bench"] = cli::add_bench_command(app);
  runs["train"] = cli::add_train_command(app);
  runs["experiment"] = cli::add_experiment_command(app);
  runs["report"] = cli::add_report_command(app);
  runs["cam"] = cli::add_cam_command(app);
  if (argc > 1) {
    if (const auto unknown = cli::unknown_command(app, argv[1]); !unknown.empty()) {
      std::cerr << "dtrain: error: " + unknown + "\n";
      return cli::kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, like every other error (CLI11 adds a second: "Run with --help ..."), and one
    // status for every usage error rather than CLI11's own per kind (105, 109, ...).
    std::cerr << cli::parse_error_line(app, e) + "\n";
    return cli::kExitUsage;
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " + cli::error_message(e) + "\n";  // one write: see io/Console.cpp
    return cli::exit_code_for(e);
  }
  return cli::kExitFailure;
}
