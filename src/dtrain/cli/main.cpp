// dtrain: one tool for every strategy. `dtrain --help` lists the subcommands.
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include <c10/util/Exception.h>

#include "dtrain/cli/Commands.h"

namespace dtrain::cli {

std::string error_message(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e))
    return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace dtrain::cli

int main(int argc, char** argv) {
  CLI::App app{"dtrain: distributed neural-network training on LibTorch"};
  app.require_subcommand(1);
  std::map<std::string, dtrain::cli::Run> runs;
  runs["info"] = dtrain::cli::add_info_command(app);
  runs["launch"] = dtrain::cli::add_launch_command(app);
  runs["bench"] = dtrain::cli::add_bench_command(app);
  runs["train"] = dtrain::cli::add_train_command(app);
  runs["experiment"] = dtrain::cli::add_experiment_command(app);
  runs["report"] = dtrain::cli::add_report_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " + dtrain::cli::error_message(e) + "\n";  // one write: see io/Console.cpp
    return 1;
  }
  return 1;
}
