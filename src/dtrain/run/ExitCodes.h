// The exit status of every dtrain command, one table for all of them (docs/command-line.md), and
// the helpers that sort an error into it.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace dtrain::run {

// Note [Exit codes]
// 0  success.
// 1  a failure while running: a peer died or timed out, the rendezvous failed, a file could not
//    be written, a run of an experiment failed.
// 2  a usage error, found before any training starts: an unknown command or flag, a bad flag
//    value, an unknown key or a bad value in the configuration, an input the command names that
//    cannot be used (a data set's files, a checkpoint to resume from, a run folder). Python's
//    argparse and torchrun exit 2 for their usage errors too, so scripts around them can tell a
//    mistake in the command from a failed run.
// A command that starts workers (dtrain train --nproc, dtrain launch, dtrain bench comm --nproc)
// exits with the status of the first worker that failed, as torchrun does: a worker refusing its
// data set exits 2 and so does the job. A worker killed by signal N counts as 128 + N; the
// launcher itself, stopped by SIGINT or SIGTERM, stops its workers and exits 130 or 143. A worker
// program that cannot be started exits 127 (not found) or 126 (not executable), as a shell does.
inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// A mistake in what the user gave, reported with exit status 2 (Note [Exit codes]).
class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// An exception's message for the user: without the C++ stack trace that LibTorch's errors carry.
std::string error_message(const std::exception& e);

// The status for a command that ended with `e`: 2 for the errors that describe a user's mistake
// (config::ConfigError, std::invalid_argument and so UsageError), 1 for any other.
int exit_code_for(const std::exception& e);

// Called in a catch block: rethrows the error being handled, which came from checking what the user
// gave (reading the data set, loading a checkpoint), as a UsageError with its message; a
// communication error is rethrown as it is, since a peer failed.
[[noreturn]] void rethrow_as_usage_error(const std::exception& e);

// Runs `check`, whose errors are the inputs' (Note [Exit codes]), and returns what it returns.
template <class Check>
auto checking_inputs(Check&& check) -> decltype(check()) {
  try {
    return check();
  } catch (const std::exception& e) {
    rethrow_as_usage_error(e);
  }
}

}  // namespace dtrain::run
