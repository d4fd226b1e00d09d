// Starting and reaping worker processes: fork+exec with the output on pipes, each worker in its
// own process group and killed with the launcher (PR_SET_PDEATHSIG), and its exit read with
// waitid without reaping it until the attempt is over.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dtrain/comm/rendezvous/Rendezvous.h"

namespace dtrain::launch {

struct Worker {
  pid_t pid = -1;
  int rank = 0;  // the global rank whose output this process carries; for mpirun, unused
  int out_fd = -1;
  int err_fd = -1;
  bool exited = false;  // a zombie until the attempt is over, see exit_status()
  int status = 0;
};

struct SpawnError {
  int error = 0;  // errno of the failed exec
};

// `name` itself when it holds a '/', else the first executable `name` in the PATH of `env`.
std::optional<std::string> find_program(const std::string& name, const comm::Environment& env);

// Forks and execs `program` with argv `args` and exactly the environment `env`; returns the
// worker with its stdout and stderr on non-blocking pipes, or the exec's errno when the program
// could not be run. launcher_pid: getpid() of the caller, for the child to check it still lives.
std::variant<Worker, SpawnError> spawn(const std::string& program, const std::vector<std::string>& args,
                                       const comm::Environment& env, pid_t launcher_pid);

// A worker's exit as a wait status, once it has exited; the worker stays a zombie (WNOWAIT) so
// its pid cannot be reused while the launcher may still signal its process group.
std::optional<int> exit_status(pid_t pid);

// Sends `signo` to every worker's process group. Reaped workers too: their groups may still hold
// children that keep the pipes open.
void signal_workers(const std::vector<Worker>& workers, int signo);

// Waits for every worker and frees its pid (and so its process group id) for reuse.
void reap(const std::vector<Worker>& workers);

// A wait status as a shell would give it: the exit code, or 128 + the signal.
int exit_code_of(int status);

// "failed with exit code 3", "was killed by SIGKILL (9)".
std::string describe_status(int status);

}  // namespace dtrain::launch
