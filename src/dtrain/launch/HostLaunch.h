// A job over several hosts from one command (`dtrain launch --hostfile FILE`), as DeepSpeed's and
// Horovod's runners do it: over SSH, each host runs `dtrain launch --nnodes N --node-rank i` (the
// multi-node launcher that spawns and watches its workers) with the first host as the rendezvous.
// This side streams every host's output with a "[host] " prefix, forwards SIGINT/SIGTERM/SIGHUP,
// and stops every host when one fails; each host records its launcher's pid under a job id, so
// that `dtrain launch --hostfile FILE --stop JOB` stops a job from anywhere (the distributed-optimizer
// study's stop_distributed.sh).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/launch/Hostfile.h"

namespace dtrain::launch {

struct HostLaunchOptions {
  std::vector<Host> hosts;  // the first one hosts the rendezvous store
  // Arguments given to ssh before the host, after those of its own that a user's -o overrides; each
  // is one argument ("-o", "StrictHostKeyChecking=no", "-i", "key").
  std::vector<std::string> ssh_options;
  std::string ssh = "ssh";        // looked up in PATH
  std::string job_id;             // [A-Za-z0-9._-]+; also every host's --run-id
  std::string remote_dtrain;      // the dtrain binary on the hosts (by default this one's path)
  std::string working_directory;  // where the workers run on every host (by default this one's)
  int master_port = 29500;
  // Flags for every host's `dtrain launch` besides the node flags (--max-restarts 1, --threads 2,
  // --log-dir D, ...), and the worker command.
  std::vector<std::string> launch_flags;
  std::vector<std::string> command;
  // This process's environment: ssh and the variables forwarded to the hosts (kForwardedPrefixes).
  comm::Environment environment;
  std::chrono::milliseconds stop_grace{std::chrono::seconds(5)};
  int output_fd = 1;
  int diagnostics_fd = 2;
};

// Variables forwarded from this environment to every host's launcher, by name prefix: the BLAS
// settings among them, since a BLAS kernel chosen otherwise on one host rounds otherwise.
inline constexpr const char* kForwardedPrefixes[] = {"DTRAIN_", "OMP_",  "OPENBLAS_",
                                                     "MKL_",    "GLOO_", "NCCL_"};

// Where each host records its launcher's pid: $HOME/.dtrain/jobs/JOB/node<i>.pid (node, not host
// name: hosts that share a home directory over NFS keep apart).
std::string job_directory(const std::string& job_id);

// A word for a POSIX shell: itself when it is safe, else in single quotes.
std::string shell_quote(const std::string& word);

// The one command line that ssh runs on host `node`: records the pid, runs `dtrain launch` with
// the node flags, removes the pid file when it ends and exits with its status.
std::string remote_launch_command(const HostLaunchOptions& options, int node);
// The one command line that stops job_id's launcher on host `node`: SIGTERM (its workers get it
// too), SIGKILL after the grace period; prints what it did.
std::string remote_stop_command(const std::string& job_id, int node, std::chrono::milliseconds grace);

// A job id for a new job: <this host's name>-<pid>-<seconds since 1970>, filtered to [A-Za-z0-9._-].
std::string new_job_id();
// Throws std::invalid_argument unless the id is [A-Za-z0-9._-]+.
void check_job_id(const std::string& job_id);

// Runs the job on every host; returns its exit code (0 when every host's launcher succeeded).
// Throws std::invalid_argument for inconsistent options (hosts with different slots, a bad job id).
int launch_on_hosts(const HostLaunchOptions& options);
// Stops job_id on every host; returns 0 when every host was reached.
int stop_on_hosts(const HostLaunchOptions& options);

}  // namespace dtrain::launch
