// Starting the workers of one attempt. A program that cannot be run fails the attempt at once and
// is not retried; the ranks already started cannot meet the missing one and are stopped.
#include "dtrain/launch/Attempt.h"

#include <signal.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <variant>

#include "dtrain/launch/Monitor.h"
#include "dtrain/launch/WorkerEnvironment.h"

namespace dtrain::launch {
namespace {

AttemptOutcome cannot_run(const Job& job, int error) {
  AttemptOutcome outcome;
  outcome.exit_code = error == ENOENT ? 127 : 126;
  outcome.failed_rank = job.first_rank;
  outcome.failure = fmt::format(
      "dtrain launch: cannot run '{}': {}\n",
      job.options.backend == "mpi" ? job.options.mpirun : job.options.command.front(), std::strerror(error));
  outcome.retryable = false;
  return outcome;
}

class Attempt {
 public:
  Attempt(Job& job, int number) : job_(job), number_(number) {}

  AttemptOutcome run() {
    for (auto& log : job_.logs) log->begin_attempt(number_);
    const LaunchOptions& options = job_.options;
    const bool mpi = options.backend == "mpi";
    const auto program = find_program(mpi ? options.mpirun : options.command.front(), options.environment);
    if (!program) return cannot_run(job_, ENOENT);
    if (mpi) demux_ = std::make_unique<MpiOutputDemux>(job_.logs, job_.diagnostics);
    const bool started = mpi ? start(*program, mpirun_arguments(job_, number_), mpirun_environment(job_), 0)
                             : start_ranks(*program);
    // Ranks already started cannot meet the missing one: stop them now.
    if (!started) signal_workers(workers_, SIGTERM);
    WorkerOutput output(job_, demux_.get());
    Monitor monitor(job_, number_, workers_, output, demux_.get(), outcome_);
    if (options.elastic() && started) {
      monitor.set_respawn([this, program = *program](const Worker& failed, int status) {
        return replace(program, failed, status);
      });
    }
    monitor.run(/*already_stopping=*/!started);
    return outcome_;
  }

 private:
  bool start_ranks(const std::string& program) {
    for (int local = 0; local < job_.options.nproc_per_node; ++local) {
      const int rank = job_.first_rank + local;
      std::error_code ignored;
      std::filesystem::remove(error_file(job_.log_dir, rank), ignored);
      if (!start(program, job_.options.command, torchrun_environment(job_, number_, local), rank))
        return false;
    }
    return true;
  }

  // An elastic job's failed worker, replaced by a new member in its slot while this node may
  // restart workers (--max-restarts counts them); none once it may not, or the program cannot run.
  std::optional<Worker> replace(const std::string& program, const Worker& failed, int status) {
    const int max = job_.options.max_restarts;
    if (replacements_ >= max) return std::nullopt;
    ++replacements_;
    const int local = failed.rank - job_.first_rank;
    job_.diagnostics.write(
        fmt::format("dtrain launch: rank slot {} (pid {}) {}; starting a new worker in its place (restart {} "
                    "of {}), which "
                    "joins the job at its next step boundary\n",
                    failed.rank, failed.pid, describe_status(status), replacements_, max));
    auto spawned = spawn(program, job_.options.command,
                         torchrun_environment(job_, number_, local, replacements_), job_.launcher_pid);
    auto* worker = std::get_if<Worker>(&spawned);
    if (!worker) return std::nullopt;
    worker->rank = failed.rank;
    return *worker;
  }

  // False when the program could not be run; outcome_ then says why.
  bool start(const std::string& program, const std::vector<std::string>& argv, const comm::Environment& env,
             int rank) {
    auto spawned = spawn(program, argv, env, job_.launcher_pid);
    if (const auto* error = std::get_if<SpawnError>(&spawned)) {
      outcome_ = cannot_run(job_, error->error);
      return false;
    }
    Worker worker = std::get<Worker>(spawned);
    worker.rank = rank;
    workers_.push_back(worker);
    return true;
  }

  Job& job_;
  int number_;
  std::vector<Worker> workers_;
  int replacements_ = 0;
  std::unique_ptr<MpiOutputDemux> demux_;
  AttemptOutcome outcome_;
};

}  // namespace

AttemptOutcome run_attempt(Job& job, int attempt) {
  return Attempt(job, attempt).run();
}

}  // namespace dtrain::launch
