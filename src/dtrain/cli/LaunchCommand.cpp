// `dtrain launch`: torchrun's command line (dashed and underscored spellings) over launch::launch().
// Usage: dtrain launch --nproc-per-node 2 [--nnodes 2 --node-rank 1 --master-addr HOST --master-port P]
//        [--max-restarts K] [--backend gloo|mpi] [--threads T] [--log-dir D] -- ./worker ARGS...
#include <fmt/format.h>
#include <sched.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/cli/Commands.h"
#include "dtrain/config/Environment.h"
#include "dtrain/launch/Launcher.h"

namespace dtrain::cli {
namespace {

struct LaunchArgs {
  std::string nproc_per_node = "1";
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int max_restarts = 0;
  bool standalone = false;
  bool no_python = false;
  std::string backend = "gloo";
  int threads = 0;
  std::string log_dir;
  double timeout_s = 300;
  double stop_grace_s = 5;
  std::string run_id = "none";
  std::vector<std::string> command;
  CLI::Option* master_addr_option = nullptr;
};

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// torchrun accepts a count or a device kind; on a CPU build "auto" and "cpu" both mean one rank per core.
int parse_nproc(const std::string& value) {
  if (value == "auto" || value == "cpu") return usable_cores();
  try {
    size_t used = 0;
    const int n = std::stoi(value, &used);
    if (used == value.size()) return n;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(
      fmt::format("--nproc-per-node: expected a number of ranks, 'auto' or 'cpu', found '{}'", value));
}

launch::LaunchOptions to_options(const LaunchArgs& args) {
  launch::LaunchOptions options;
  options.nproc_per_node = parse_nproc(args.nproc_per_node);
  options.nnodes = args.nnodes;
  options.node_rank = args.node_rank;
  options.master_addr = args.master_addr;
  options.master_port = args.master_port;
  if (args.standalone) {
    if (args.nnodes != 1 || args.node_rank != 0) {
      throw std::invalid_argument(
          fmt::format("--standalone runs one node, found --nnodes {} --node-rank {}; drop --standalone for a "
                      "multi-node job",
                      args.nnodes, args.node_rank));
    }
    // torchrun's standalone mode: a local store on a free port.
    options.master_addr = "127.0.0.1";
    options.master_port = 0;
  }
  if (args.node_rank > 0 && args.master_addr_option->count() == 0) {
    throw std::invalid_argument(fmt::format(
        "node {} needs --master-addr, the address of node 0 where the rendezvous store runs; found none",
        args.node_rank));
  }
  options.max_restarts = args.max_restarts;
  options.backend = args.backend;
  options.threads = args.threads;
  options.log_dir = args.log_dir;
  if (args.timeout_s <= 0) {
    throw std::invalid_argument(fmt::format("--timeout: expected seconds > 0, found {}", args.timeout_s));
  }
  if (args.stop_grace_s < 0) {
    throw std::invalid_argument(
        fmt::format("--stop-grace: expected seconds >= 0, found {}", args.stop_grace_s));
  }
  options.rendezvous_timeout = std::chrono::milliseconds(static_cast<long long>(args.timeout_s * 1000));
  options.stop_grace = std::chrono::milliseconds(static_cast<long long>(args.stop_grace_s * 1000));
  options.run_id = args.run_id;
  options.command = args.command;
  options.environment = config::process_environment();
  return options;
}

}  // namespace

Run add_launch_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "launch",
      "Start one worker process per rank with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)");
  auto args = std::make_shared<LaunchArgs>();
  sub->add_option("--nproc-per-node,--nproc_per_node", args->nproc_per_node,
                  "Worker processes on this node: a number, or 'auto'/'cpu' for one per core")
      ->capture_default_str();
  sub->add_option("--nnodes", args->nnodes, "Nodes in the job")->capture_default_str();
  sub->add_option("--node-rank,--node_rank", args->node_rank, "This node's index, 0 hosts the store")
      ->capture_default_str();
  args->master_addr_option = sub->add_option("--master-addr,--master_addr", args->master_addr,
                                             "Address of node 0 (required on other nodes)")
                                 ->capture_default_str();
  sub->add_option("--master-port,--master_port", args->master_port,
                  "Port of node 0's rendezvous store; 0 = a free port (single node only)")
      ->capture_default_str();
  sub->add_option("--max-restarts,--max_restarts", args->max_restarts,
                  "Restart every worker up to this many times after a failure")
      ->capture_default_str();
  sub->add_flag("--standalone", args->standalone, "Single node with a local store on a free port");
  sub->add_flag("--no-python,--no_python", args->no_python,
                "Accepted for torchrun compatibility: the command always runs as given");
  sub->add_option("--backend", args->backend, "gloo (store hosted here), nccl, or mpi (delegates to mpirun)")
      ->check(CLI::IsMember({"gloo", "nccl", "mpi"}))
      ->capture_default_str();
  sub->add_option("--threads", args->threads,
                  "OMP_NUM_THREADS per worker; default: a user-set OMP_NUM_THREADS, else cores / ranks");
  sub->add_option("--log-dir,--log_dir", args->log_dir,
                  "Directory for rank_<r>.log; default: a fresh directory under $TMPDIR");
  sub->add_option("--timeout", args->timeout_s, "Rendezvous store timeout in seconds")->capture_default_str();
  sub->add_option("--stop-grace,--stop_grace", args->stop_grace_s,
                  "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  sub->add_option("--run-id,--run_id,--rdzv-id,--rdzv_id", args->run_id,
                  "TORCHELASTIC_RUN_ID given to workers")
      ->capture_default_str();
  sub->add_option("command", args->command, "The worker program and its arguments, after '--'");
  // Everything from the program on belongs to the worker, dashes included (torchrun's form).
  sub->positionals_at_end(true);

  return [args]() -> int {
    const launch::LaunchResult result = launch::launch(to_options(*args));
    return result.exit_code;
  };
}

}  // namespace dtrain::cli
