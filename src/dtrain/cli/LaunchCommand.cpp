// `dtrain launch`: torchrun's command line (dashed and underscored spellings) over launch::launch(),
// and DeepSpeed's --hostfile (Horovod's -H) over ssh through launch::launch_on_hosts().
// Usage: dtrain launch --nproc-per-node 2 [--nnodes 2 --node-rank 1 --master-addr HOST --master-port P]
//        [--max-restarts K] [--backend gloo|mpi] [--threads T] [--log-dir D] -- ./worker ARGS...
//        dtrain launch --hostfile FILE | -H a:2,b:2 [--ssh-option ARGS] [--job-id J] -- ./worker ARGS...
//        dtrain launch --hostfile FILE --stop J
#include <fmt/format.h>
#include <sched.h>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>
#include <sstream>

#include "dtrain/cli/Commands.h"
#include "dtrain/comm/store/StoreSecret.h"
#include "dtrain/config/Environment.h"
#include "dtrain/config/ValueText.h"
#include "dtrain/launch/HostLaunch.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/run/SelfExe.h"

namespace dtrain::cli {
namespace {

struct LaunchArgs {
  std::string nproc_per_node = "1";
  std::string nnodes = "1";  // N, or MIN:MAX for an elastic job
  double last_call_s = 1.0;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int max_restarts = 0;
  bool oversubscribe = false;
  bool standalone = false;
  bool no_python = false;
  std::string backend = "gloo";
  int threads = 0;
  std::string log_dir;
  double timeout_s = 300;
  double stop_grace_s = 5;
  std::string run_id = "none";
  std::string secret_file;
  std::vector<std::string> command;
  CLI::Option* master_addr_option = nullptr;
  // Several hosts over ssh.
  std::string hostfile;
  std::string host_list;
  std::vector<std::string> ssh_options;
  std::string stop_job;
  // Options that --hostfile sets itself, or that cannot apply to it, to refuse when given.
  std::vector<CLI::Option*> node_options;
  CLI::Option* nproc_option = nullptr;
  CLI::Option* run_id_option = nullptr;
  CLI::Option* log_dir_option = nullptr;
  CLI::Option* threads_option = nullptr;
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

// --secret-file, else DTRAIN_SECRET_FILE: checked here (readable by its owner only, not empty), so a
// bad file is refused before anything starts; made absolute, since workers run elsewhere.
std::string secret_file_of(const LaunchArgs& args, const comm::Environment& env) {
  std::string path = args.secret_file;
  std::string origin = "--secret-file";
  if (path.empty()) {
    const auto it = env.find(comm::kSecretFileVariable);
    if (it == env.end() || it->second.empty()) return {};
    path = it->second;
    origin = comm::kSecretFileVariable;
  }
  comm::read_secret_file(path, origin);
  return std::filesystem::absolute(path).string();
}

// --nnodes N, or MIN:MAX (torchrun's spelling of an elastic job): into options.nnodes (N or MAX)
// and options.min_nnodes (MIN; 0 for N).
void parse_nnodes(const std::string& text, launch::LaunchOptions& options) {
  const auto number = [&](const std::string& part) {
    const auto value = config::detail::parse_int(part);
    if (!value || *value < 1 || *value > std::numeric_limits<int>::max()) {
      throw std::invalid_argument(
          fmt::format("--nnodes {}: expected a number of nodes, or MIN:MAX for an elastic job", text));
    }
    return static_cast<int>(*value);
  };
  const auto colon = text.find(':');
  if (colon == std::string::npos) {
    options.nnodes = number(text);
    return;
  }
  options.min_nnodes = number(text.substr(0, colon));
  options.nnodes = number(text.substr(colon + 1));
}

launch::LaunchOptions to_options(const LaunchArgs& args) {
  launch::LaunchOptions options;
  options.nproc_per_node = parse_nproc(args.nproc_per_node);
  parse_nnodes(args.nnodes, options);
  if (!(args.last_call_s > 0)) {
    throw std::invalid_argument(
        fmt::format("--rdzv-last-call: expected seconds > 0, found {}", args.last_call_s));
  }
  options.last_call = std::chrono::milliseconds(static_cast<std::int64_t>(args.last_call_s * 1000.0));
  options.node_rank = args.node_rank;
  options.master_addr = args.master_addr;
  options.master_port = args.master_port;
  if (args.standalone) {
    if (options.nnodes != 1 || options.elastic() || args.node_rank != 0) {
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
  options.oversubscribe = args.oversubscribe;
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
  options.secret_file = secret_file_of(args, options.environment);
  return options;
}

// --hostfile / -H: every host runs `dtrain launch` with the node flags; the flags given here that
// concern each node's own launcher go along.
int run_on_hosts(const LaunchArgs& args) {
  for (const CLI::Option* option : args.node_options) {
    if (option->count() > 0) {
      throw std::invalid_argument(fmt::format(
          "{} cannot be combined with --hostfile or -H, which give every host its node rank, the node count "
          "and the rendezvous (the first host); drop {}",
          option->get_name(), option->get_name()));
    }
  }
  if (args.nproc_option->count() > 0) {
    throw std::invalid_argument(
        "--nproc-per-node cannot be combined with --hostfile or -H: each host's ranks are its slots "
        "(HOST slots=N, or -H HOST:N)");
  }
  if (args.backend == "mpi") {
    throw std::invalid_argument(
        "--backend mpi cannot be combined with --hostfile or -H: run mpirun --hostfile FILE directly "
        "(README: \"Several hosts\")");
  }
  launch::HostLaunchOptions options;
  options.hosts =
      args.hostfile.empty() ? launch::parse_host_list(args.host_list) : launch::read_hostfile(args.hostfile);
  for (const auto& value : args.ssh_options) {
    std::istringstream words(value);
    for (std::string word; words >> word;) options.ssh_options.push_back(word);
  }
  options.job_id = args.run_id_option->count() > 0 ? args.run_id : launch::new_job_id();
  options.environment = config::process_environment();
  if (args.timeout_s <= 0) {
    throw std::invalid_argument(fmt::format("--timeout: expected seconds > 0, found {}", args.timeout_s));
  }
  if (args.stop_grace_s < 0) {
    throw std::invalid_argument(
        fmt::format("--stop-grace: expected seconds >= 0, found {}", args.stop_grace_s));
  }
  options.stop_grace = std::chrono::milliseconds(static_cast<long long>(args.stop_grace_s * 1000));
  if (!args.stop_job.empty()) {
    options.job_id = args.stop_job;
    return launch::stop_on_hosts(options);
  }
  if (args.command.empty()) {
    throw std::invalid_argument(
        "dtrain launch: expected a command to run after '--', found none; e.g. dtrain launch --hostfile "
        "hosts "
        "-- dtrain train config.yaml");
  }
  options.remote_dtrain = run::self_executable();
  options.working_directory = std::filesystem::current_path().string();
  options.master_port = args.master_port == 0 ? 29500 : args.master_port;
  options.launch_flags = {"--max-restarts", std::to_string(args.max_restarts),
                          "--backend",      args.backend,
                          "--timeout",      fmt::format("{}", args.timeout_s),
                          "--stop-grace",   fmt::format("{}", args.stop_grace_s)};
  if (args.threads_option->count() > 0) {
    options.launch_flags.insert(options.launch_flags.end(), {"--threads", std::to_string(args.threads)});
  }
  if (args.log_dir_option->count() > 0) {
    options.launch_flags.insert(options.launch_flags.end(), {"--log-dir", args.log_dir});
  }
  // Each host reads the secret from the same path (the file itself is not copied).
  if (const std::string secret_file = secret_file_of(args, options.environment); !secret_file.empty()) {
    options.launch_flags.insert(options.launch_flags.end(), {"--secret-file", secret_file});
  }
  options.command = args.command;
  return launch::launch_on_hosts(options);
}

}  // namespace

namespace {

// The options of a job over several hosts from one command (launch/HostLaunch.h).
void add_host_options(CLI::App& sub, LaunchArgs& args) {
  auto* hostfile =
      sub.add_option("--hostfile", args.hostfile,
                     "Run on every host of FILE over ssh, one 'HOST slots=N' a line (DeepSpeed's "
                     "format); the first host holds the rendezvous");
  auto* hosts = sub.add_option("-H,--hosts", args.host_list, "Hosts as HOST:SLOTS,... instead of --hostfile");
  hostfile->excludes(hosts);
  sub.add_option("--ssh-option", args.ssh_options,
                 "Arguments for ssh, split at spaces; repeatable (e.g. --ssh-option '-i key -p 2222')");
  sub.add_option("--stop", args.stop_job,
                 "Stop job JOB on every host of --hostfile/-H (its launchers and workers), then exit");
}

}  // namespace

Run add_launch_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "launch",
      "Start one worker process per rank with torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...)");
  auto args = std::make_shared<LaunchArgs>();
  args->nproc_option =
      sub->add_option("--nproc-per-node,--nproc_per_node", args->nproc_per_node,
                      "Worker processes on this node: a number, or 'auto'/'cpu' for one per core")
          ->capture_default_str();
  args->node_options.push_back(
      sub->add_option("--nnodes", args->nnodes,
                      "Nodes in the job; MIN:MAX for an elastic job that goes on when nodes leave and takes "
                      "them back when they return (parallel.strategy data_parallel or zero, --backend gloo)")
          ->capture_default_str());
  sub->add_option("--rdzv-last-call", args->last_call_s,
                  "Elastic jobs: seconds a membership round waits for one more node once MIN are there")
      ->capture_default_str();
  args->node_options.push_back(
      sub->add_option("--node-rank,--node_rank", args->node_rank, "This node's index, 0 hosts the store")
          ->capture_default_str());
  args->master_addr_option = sub->add_option("--master-addr,--master_addr", args->master_addr,
                                             "Address of node 0 (required on other nodes)")
                                 ->capture_default_str();
  args->node_options.push_back(args->master_addr_option);
  sub->add_option("--master-port,--master_port", args->master_port,
                  "Port of node 0's rendezvous store; 0 = a free port (single node only)")
      ->capture_default_str();
  sub->add_option("--max-restarts,--max_restarts", args->max_restarts,
                  "Restart every worker up to this many times after a failure")
      ->capture_default_str();
  sub->add_flag("--oversubscribe", args->oversubscribe,
                "Start more workers on this node than 4 per core (at least 16), the bound without it");
  args->node_options.push_back(
      sub->add_flag("--standalone", args->standalone, "Single node with a local store on a free port"));
  sub->add_flag("--no-python,--no_python", args->no_python,
                "Accepted for torchrun compatibility: the command always runs as given");
  sub->add_option("--backend", args->backend, "gloo (store hosted here), nccl, or mpi (delegates to mpirun)")
      ->check(CLI::IsMember({"gloo", "nccl", "mpi"}))
      ->capture_default_str();
  args->threads_option = sub->add_option(
      "--threads", args->threads,
      "OMP_NUM_THREADS per worker; default: a user-set OMP_NUM_THREADS, else the cores divided among "
      "every worker on them, of this launcher and of the job's other launchers on this machine");
  args->log_dir_option =
      sub->add_option("--log-dir,--log_dir", args->log_dir,
                      "Directory for rank_<r>.log; default: a fresh directory under $TMPDIR");
  sub->add_option("--timeout", args->timeout_s, "Rendezvous store timeout in seconds")->capture_default_str();
  sub->add_option(
      "--secret-file,--secret_file", args->secret_file,
      "A file (chmod 600) with a shared secret that every process joining the rendezvous store must "
      "prove; default: $DTRAIN_SECRET_FILE");
  sub->add_option("--stop-grace,--stop_grace", args->stop_grace_s,
                  "Seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  args->run_id_option = sub->add_option("--run-id,--run_id,--rdzv-id,--rdzv_id,--job-id", args->run_id,
                                        "TORCHELASTIC_RUN_ID given to workers; with --hostfile the job's id "
                                        "(default: HOST-PID-TIME), which --stop takes")
                            ->capture_default_str();
  add_host_options(*sub, *args);
  sub->add_option("command", args->command, "The worker program and its arguments, after '--'");
  // Everything from the program on belongs to the worker, dashes included (torchrun's form).
  sub->positionals_at_end(true);

  return [args]() -> int {
    if (!args->hostfile.empty() || !args->host_list.empty()) return run_on_hosts(*args);
    if (!args->stop_job.empty() || !args->ssh_options.empty()) {
      throw std::invalid_argument(fmt::format("{} needs --hostfile FILE or -H HOSTS, found neither",
                                              args->stop_job.empty() ? "--ssh-option" : "--stop"));
    }
    const launch::LaunchResult result = launch::launch(to_options(*args));
    return result.exit_code;
  };
}

}  // namespace dtrain::cli
