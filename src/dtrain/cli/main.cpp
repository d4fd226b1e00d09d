// dtrain: one tool for every strategy. `dtrain --help` lists the subcommands.
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include <c10/util/Exception.h>

#include "dtrain/cli/Commands.h"
#include "dtrain/util/Allocator.h"

namespace dtrain::cli {

std::string error_message(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e))
    return torch_error->what_without_backtrace();
  return e.what();
}

CLI::Validator at_least(long long minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        long long value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "expected a whole number, found " + text;
        if (value < minimum) return "must be at least " + std::to_string(minimum) + ", found " + text;
        return {};
      },
      "INT>=" + std::to_string(minimum));
}

std::string unknown_command(const CLI::App& app, const std::string& word) {
  if (word.empty() || word.front() == '-') return {};
  std::string names;
  for (const auto* sub : app.get_subcommands({})) {
    if (sub->check_name(word)) return {};
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return "unknown command '" + word + "'; the commands are " + names;
}

}  // namespace dtrain::cli

int main(int argc, char** argv) {
  dtrain::util::keep_freed_memory();  // Note [Keeping freed memory]
  CLI::App app{"dtrain: distributed neural-network training on LibTorch"};
  app.require_subcommand(1);
  std::map<std::string, dtrain::cli::Run> runs;
  runs["info"] = dtrain::cli::add_info_command(app);
  runs["launch"] = dtrain::cli::add_launch_command(app);
  runs["bench"] = dtrain::cli::add_bench_command(app);
  runs["train"] = dtrain::cli::add_train_command(app);
  runs["experiment"] = dtrain::cli::add_experiment_command(app);
  runs["report"] = dtrain::cli::add_report_command(app);
  runs["cam"] = dtrain::cli::add_cam_command(app);
  if (argc > 1) {
    if (const auto unknown = dtrain::cli::unknown_command(app, argv[1]); !unknown.empty()) {
      std::cerr << "dtrain: error: " + unknown + "\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, like every other error (CLI11 adds a second: "Run with --help ...").
    std::cerr << "dtrain: error: " + std::string(e.what()) + " (dtrain --help lists the options)\n";
    return e.get_exit_code();
  }
  try {
    for (auto* sub : app.get_subcommands()) return runs.at(sub->get_name())();
  } catch (const std::exception& e) {
    std::cerr << "dtrain: error: " + dtrain::cli::error_message(e) + "\n";  // one write: see io/Console.cpp
    return 1;
  }
  return 1;
}
