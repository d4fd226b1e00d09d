// The subcommands of the `dtrain` tool. Each registers its options on the CLI11 app and returns
// the callback that runs it; the callback returns the process exit code (Note [Exit codes]).
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <string>

#include "dtrain/run/ExitCodes.h"

namespace dtrain::cli {

// The exit statuses and the sorting of errors into them are the run's (run/ExitCodes.h); every
// command returns them.
using run::checking_inputs;
using run::error_message;
using run::exit_code_for;
using run::kExitFailure;
using run::kExitSuccess;
using run::kExitUsage;
using run::UsageError;

using Run = std::function<int()>;

Run add_info_command(CLI::App& app);
Run add_launch_command(CLI::App& app);
Run add_bench_command(CLI::App& app);
Run add_train_command(CLI::App& app);
Run add_experiment_command(CLI::App& app);
Run add_report_command(CLI::App& app);
Run add_cam_command(CLI::App& app);
Run add_tokenizer_command(CLI::App& app);

// The names a configuration may use, with a line of help each, as their layers register them
// (strategies with their parallel.<name>.* keys, models, optimizers, schedules, losses, data sets,
// partitions): the footer of `dtrain train --help`.
std::string registered_names_help();
// Every configuration key as key=default with a line of help, from the description the YAML reader
// validates against (config::config_key_help): the head of that footer.
std::string config_keys_help();

// A CLI11 check for an integer option: "--nproc: must be at least 1, found 0".
CLI::Validator at_least(long long minimum);

// The message for `dtrain WORD ...` when WORD is not a subcommand, or "" when it is one (or an
// option): "unknown command 'trian'; the commands are bench, experiment, ...; did you mean train?".
std::string unknown_command(const CLI::App& app, const std::string& word);

// The one line for a command line that `app` refused while parsing: "dtrain: error: unknown option
// --nprocs; did you mean --nproc? (dtrain train --help lists the options)", the nearest option
// suggested as for a misspelt configuration key; other errors in CLI11's words.
std::string parse_error_line(const CLI::App& app, const CLI::ParseError& error);

}  // namespace dtrain::cli
