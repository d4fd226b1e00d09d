// The launcher behind `dtrain launch` (and `dtrain train --nproc`, `dtrain bench --nproc`): starts
// one process per local rank with torchrun's environment, hosts the rendezvous store on node 0
// like torchrun's agent, forwards signals, stops every rank when one fails, and restarts the job
// up to max_restarts times. Starting processes is not communication: this is its own layer,
// between experiment/ and train/, and uses comm/ only for the store and the environment type.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/rendezvous/Rendezvous.h"

namespace dtrain::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // The rendezvous store listens on this address only (node 0's address as the other nodes reach
  // it; 127.0.0.1 on a single node, reachable from this host alone).
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // A file holding the store's shared secret (comm/store/StoreSecret.h): the store refuses whoever cannot
  // prove it, and workers get the path as DTRAIN_SECRET_FILE. "" = anyone who reaches the port joins.
  std::string secret_file;  // 0 on a single node: a free port, so two jobs can share a host
  int max_restarts = 0;
  // --nnodes MIN:MAX (min_nnodes = MIN, nnodes = MAX): an elastic job, whose workers agree on their
  // membership themselves (Note [Elastic workers] in run/ElasticWorker.h). A worker that fails is
  // replaced by a new one (up to max_restarts times on this node), which joins at the next step
  // boundary; the other nodes' workers go on. 0: a job of exactly nnodes nodes.
  int min_nnodes = 0;
  // How long an elastic round waits for one more member once MIN are there.
  std::chrono::milliseconds last_call{std::chrono::seconds(1)};
  bool elastic() const { return min_nnodes > 0; }
  // Start more local workers than max_local_workers() allows (mpirun's --oversubscribe).
  bool oversubscribe = false;
  std::string backend = "gloo";  // "mpi" delegates to mpirun
  int threads = 0;               // intra-op threads per worker; 0 = cores / nproc_per_node
  std::string log_dir;           // per-rank logs; "" = a fresh directory under $TMPDIR
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(5)};
  std::chrono::milliseconds stop_grace{std::chrono::seconds(5)};  // SIGTERM, then SIGKILL
  std::vector<std::string> command;                               // program and its arguments, run as is
  comm::Environment environment;  // the environment workers inherit, before torchrun's variables
  std::string run_id = "none";    // TORCHELASTIC_RUN_ID, torchrun's default for a static job
  std::string mpirun = "mpirun";  // the program behind backend "mpi", looked up in PATH
  int tail_lines = 20;            // lines of a failed rank's log quoted in the report
  // Where rank 0's stdout goes unchanged, and where every rank's stderr ("[rank r] " prefixed)
  // and the launcher's own reports go. The launcher only forwards: it writes nowhere else.
  int output_fd = 1;
  int diagnostics_fd = 2;
  // Rank 0's progress bar on diagnostics_fd: workers get DTRAIN_STATUS_RELAY=1, send their status
  // as lines that begin with '\r', and the launcher redraws them in place below the other lines.
  // Unset: when diagnostics_fd is a terminal.
  std::optional<bool> status_line;
};

// What an elastic job's launcher tells each worker it starts (run/ElasticWorker.h reads them):
// "MIN:MAX" members, the worker's id in the job, and the rounds' last call in milliseconds.
inline constexpr const char* kElasticVariable = "DTRAIN_ELASTIC";
inline constexpr const char* kElasticIdVariable = "DTRAIN_ELASTIC_ID";
inline constexpr const char* kElasticLastCallVariable = "DTRAIN_ELASTIC_LAST_CALL_MS";

// The environment variable that asks a worker to relay its status line through the launcher.
inline constexpr const char* kStatusRelayVariable = "DTRAIN_STATUS_RELAY";

// Whether the launcher that started this worker asked it to relay its status line
// (kStatusRelayVariable=1 in `env`). cli/ reads it and tells io::Console, which reads no
// environment itself.
bool status_relay_requested(const comm::Environment& env);

struct LaunchResult {
  int exit_code = 0;               // 0 when every rank of the last attempt succeeded
  int restarts = 0;                // attempts after the first
  std::optional<int> failed_rank;  // the first rank that failed in the last attempt
  std::string failure;             // "rank 1 (pid 123) failed with exit code 3" and the tail of its log
  std::string log_dir;
  std::optional<int> signal;  // set when SIGINT/SIGTERM/SIGHUP to the launcher ended the job
};

// How a launcher that starts `nproc` local workers of a job configured with parallel.backend
// `configured` starts them: "mpi" (through mpirun) or "gloo" (torchrun's environment and a store).
// "auto" is resolved by comm::choose_backend (Note [Choosing a backend]) for ranks that would be
// MPI processes if `mpirun` is found in the PATH of `env`; the workers, configured alike, then
// choose the same backend from the layout they see.
std::string start_method_for(const std::string& configured, int nproc, bool cuda,
                             const comm::Environment& env, const std::string& mpirun = "mpirun");

// Note [A bound on local workers]
// Every local worker is a process with its own LibTorch, copy of the model and data loader, so a
// mistyped --nproc 1000 on a laptop starts processes until memory or the rendezvous gives out,
// and stops nothing before. mpirun refuses more ranks than slots (cores) unless told
// --oversubscribe; dtrain is looser, since small CPU jobs run well with a few ranks per core
// (tests run 5 ranks on 2 cores): at most 4 per usable core and never fewer than 16, the same
// flag lifting the bound.
int max_local_workers();

// Throws std::invalid_argument naming `nproc`, the bound and the core count when `nproc` local
// workers are more than max_local_workers() and `oversubscribe` is false. launch() checks it;
// commands call it before they create anything, so a refused job leaves nothing behind.
void check_local_workers(int nproc, bool oversubscribe);

// Runs the job to completion. Throws std::invalid_argument for inconsistent options. While it
// runs, SIGINT, SIGTERM and SIGHUP to this process are forwarded to every worker (the previous
// handlers come back on return), so one launch() at a time per process. Workers die with the
// calling thread (PR_SET_PDEATHSIG): call it from a thread that outlives the job.
LaunchResult launch(const LaunchOptions& options);

}  // namespace dtrain::launch
