// The dtrain tool's command line as a library call (cli::run, declared in Main.h).
#include "dtrain/cli/Main.h"

#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "dtrain/cli/Cli11Compat.h"
#include "dtrain/cli/Commands.h"
#include "dtrain/util/Allocator.h"

namespace dtrain::cli {

int run(int argc, char** argv) {
  util::keep_freed_memory();  // Note [Keeping freed memory]
  CLI::App app{"dtrain: distributed neural-network training on LibTorch"};
  compat::print_text_as_written(app);
  app.require_subcommand(1);
  std::map<std::string, Run> runs;
  runs["info"] = add_info_command(app);
  runs["launch"] = add_launch_command(app);
  runs["bench"] = add_bench_command(app);
  runs["train"] = add_train_command(app);
  runs["experiment"] = add_experiment_command(app);
  runs["report"] = add_report_command(app);
  runs["cam"] = add_cam_command(app);
  runs["tokenizer"] = add_tokenizer_command(app);
  if (argc > 1) {
    if (const auto unknown = unknown_command(app, argv[1]); !unknown.empty()) {
      std::cerr << "dtrain: error: " + unknown + "\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, like every other error (CLI11 adds a second: "Run with --help ..."), and one
    // status for every usage error rather than CLI11's own per kind (105, 109, ...).
    std::cerr << parse_error_line(app, e) + "\n";
    return kExitUsage;
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " + error_message(e) + "\n";  // one write: see io/Console.cpp
    return exit_code_for(e);
  }
  return kExitFailure;
}

}  // namespace dtrain::cli
