// The launcher behind `dtrain launch`: fork+exec of one worker per local rank (or one mpirun),
// torchrun's environment and agent-hosted store, a single poll loop that copies every rank's
// output to its log and to the launcher's streams, failure detection, restarts and signal forwarding.
#include "dtrain/launch/Launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <variant>

#include "dtrain/launch/Diagnostics.h"
#include "dtrain/launch/MpiOutputDemux.h"
#include "dtrain/launch/NodeStore.h"
#include "dtrain/launch/RankLog.h"
#include "dtrain/launch/Signals.h"
#include "dtrain/launch/Spawn.h"

namespace dtrain::launch {
namespace {

using comm::Environment;

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// ---------------------------------------------------------------------------------------------
// Attempts.

struct AttemptOutcome {
  bool succeeded = false;
  int exit_code = 0;
  std::optional<int> failed_rank;
  std::string failure;
  std::optional<int> signal;  // the launcher was asked to stop
  bool retryable = true;      // false when the command cannot be run at all
};

// torchrun's error file: {"message": {"message": "<Type>: <msg>", "extraInfo": {"py_callstack": ...}}}
// or {"message": "<msg>"}. Anything else is quoted as it is.
std::string read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  if (text.empty()) return {};
  const auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("message")) return text.substr(0, 4000);
  const auto& message = json["message"];
  if (message.is_string()) return message.get<std::string>();
  if (!message.is_object()) return message.dump();
  std::string out = message.contains("message") && message["message"].is_string()
                        ? message["message"].get<std::string>()
                        : message.dump();
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const auto& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      out += "\n" + extra["py_callstack"].get<std::string>();
    }
  }
  return out;
}

class Launcher {
 public:
  Launcher(const LaunchOptions& options, SignalForwarding& signals)
      : options_(options),
        signals_(signals),
        launcher_pid_(::getpid()),
        diagnostics_(options.diagnostics_fd, options.status_line.value_or(options.diagnostics_fd >= 0 &&
                                                                          ::isatty(options.diagnostics_fd))) {
  }

  LaunchResult run() {
    LaunchResult result;
    result.log_dir = prepare_log_dir();
    say(fmt::format("dtrain launch: logs in {}\n", result.log_dir));
    const bool mpi = options_.backend == "mpi";
    const int world_size = options_.nnodes * options_.nproc_per_node;
    // With mpirun this node runs every rank; otherwise its own ranks.
    const int first_rank = mpi ? 0 : options_.node_rank * options_.nproc_per_node;
    const int local_ranks = mpi ? world_size : options_.nproc_per_node;
    for (int r = first_rank; r < first_rank + local_ranks; ++r) {
      logs_.push_back(std::make_unique<RankLog>(r, fmt::format("{}/rank_{}.log", log_dir_, r),
                                                r == 0 ? options_.output_fd : -1, diagnostics_,
                                                static_cast<size_t>(options_.tail_lines)));
    }
    if (!mpi) host_or_join_store();

    for (int attempt = 0;; ++attempt) {
      const AttemptOutcome outcome = run_attempt(attempt);
      diagnostics_.end_status();
      result.restarts = attempt;
      result.exit_code = outcome.exit_code;
      result.failed_rank = outcome.failed_rank;
      result.failure = outcome.failure;
      result.signal = outcome.signal;
      if (outcome.succeeded) return result;
      if (!outcome.signal) say(outcome.failure);
      if (outcome.signal || !outcome.retryable || attempt >= options_.max_restarts) return result;
      say(fmt::format("dtrain launch: restarting all workers (restart {} of {})\n", attempt + 1,
                      options_.max_restarts));
    }
  }

 private:
  void say(const std::string& text) { diagnostics_.write(text); }

  std::string prepare_log_dir() {
    std::error_code ec;
    if (!options_.log_dir.empty()) {
      fs::create_directories(options_.log_dir, ec);
      if (ec) {
        throw std::invalid_argument(
            fmt::format("dtrain launch: cannot create the log directory {}: {}; choose "
                        "a writable --log-dir",
                        options_.log_dir, ec.message()));
      }
      log_dir_ = fs::absolute(options_.log_dir).lexically_normal().string();
      return log_dir_;
    }
    const auto tmp = options_.environment.find("TMPDIR");
    std::string base = tmp != options_.environment.end() && !tmp->second.empty() ? tmp->second : "/tmp";
    std::string pattern = base + "/dtrain-launch-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::invalid_argument(
          fmt::format("dtrain launch: cannot create a log directory under {}: {}; set TMPDIR or --log-dir",
                      base, std::strerror(errno)));
    }
    log_dir_ = pattern;
    return log_dir_;
  }

  // Node 0 hosts the store like torchrun's agent; the workers join it as clients under the
  // prefix of their attempt. Other nodes join it too, to hear of a failure on another node.
  void host_or_join_store() {
    store_ = std::make_unique<NodeStore>(options_);
    if (options_.node_rank == 0) {
      say(fmt::format("dtrain launch: rendezvous store at {}:{}\n", options_.master_addr, store_->port()));
    }
  }

  Environment worker_environment(int attempt, int local_rank) const {
    Environment env = options_.environment;
    const int world_size = options_.nnodes * options_.nproc_per_node;
    const int rank = options_.node_rank * options_.nproc_per_node + local_rank;
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local_rank);
    env["WORLD_SIZE"] = std::to_string(world_size);
    env["LOCAL_WORLD_SIZE"] = std::to_string(options_.nproc_per_node);
    env["GROUP_RANK"] = std::to_string(options_.node_rank);
    env["GROUP_WORLD_SIZE"] = std::to_string(options_.nnodes);
    env["ROLE_RANK"] = std::to_string(rank);
    env["ROLE_WORLD_SIZE"] = std::to_string(world_size);
    env["ROLE_NAME"] = "default";
    env["MASTER_ADDR"] = options_.master_addr;
    env["MASTER_PORT"] = std::to_string(store_->port());
    env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
    env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options_.max_restarts);
    env["TORCHELASTIC_RUN_ID"] = options_.run_id;
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    env["TORCHELASTIC_ERROR_FILE"] = error_file(rank);
    env["OMP_NUM_THREADS"] = std::to_string(threads_per_worker());
    if (diagnostics_.status_line()) {
      env[kStatusRelayVariable] = "1";
    } else {
      env.erase(kStatusRelayVariable);  // from an enclosing launcher, which does not see these lines
    }
    return env;
  }

  int threads_per_worker() const {
    if (options_.threads > 0) return options_.threads;
    const auto user = options_.environment.find("OMP_NUM_THREADS");
    if (user != options_.environment.end()) {
      try {
        const int value = std::stoi(user->second);
        if (value > 0) return value;
      } catch (const std::exception&) {
      }
    }
    const int local =
        options_.backend == "mpi" ? options_.nnodes * options_.nproc_per_node : options_.nproc_per_node;
    return std::max(1, available_cores() / local);
  }

  std::string error_file(int rank) const { return fmt::format("{}/rank_{}.error.json", log_dir_, rank); }

  AttemptOutcome cannot_run(int error) const {
    AttemptOutcome outcome;
    outcome.exit_code = error == ENOENT ? 127 : 126;
    outcome.failed_rank = first_rank();
    outcome.failure = fmt::format("dtrain launch: cannot run '{}': {}\n",
                                  options_.backend == "mpi" ? options_.mpirun : options_.command.front(),
                                  std::strerror(error));
    outcome.retryable = false;
    return outcome;
  }

  int first_rank() const {
    return options_.backend == "mpi" ? 0 : options_.node_rank * options_.nproc_per_node;
  }

  AttemptOutcome run_attempt(int attempt) {
    for (auto& log : logs_) log->begin_attempt(attempt);
    workers_.clear();
    demux_.reset();
    const bool mpi = options_.backend == "mpi";
    std::vector<std::string> args;
    Environment env;
    const std::string program_name = mpi ? options_.mpirun : options_.command.front();
    const auto program = find_program(program_name, options_.environment);
    if (!program) return cannot_run(ENOENT);

    AttemptOutcome outcome;
    auto start = [&](const std::vector<std::string>& argv, const Environment& environment, int rank) {
      auto spawned = spawn(*program, argv, environment, launcher_pid_);
      if (auto* error = std::get_if<SpawnError>(&spawned)) {
        outcome = cannot_run(error->error);
        return false;
      }
      Worker worker = std::get<Worker>(spawned);
      worker.rank = rank;
      workers_.push_back(worker);
      return true;
    };

    bool started = true;
    if (mpi) {
      demux_ = std::make_unique<MpiOutputDemux>(logs_, diagnostics_);
      started = start(mpirun_arguments(attempt), mpirun_environment(), 0);
    } else {
      for (int local = 0; local < options_.nproc_per_node && started; ++local) {
        const int rank = first_rank() + local;
        std::error_code ignored;
        fs::remove(error_file(rank), ignored);
        started = start(options_.command, worker_environment(attempt, local), rank);
      }
    }
    if (!started) {
      // Ranks already started cannot meet the missing one: stop them now.
      stop_all(SIGTERM);
      monitor(attempt, outcome, /*already_stopping=*/true);
      return outcome;
    }
    monitor(attempt, outcome, false);
    return outcome;
  }

  std::vector<std::string> mpirun_arguments(int attempt) const {
    const int nproc = options_.nproc_per_node;
    std::vector<std::string> args{options_.mpirun, "-n", std::to_string(nproc)};
    if (nproc > available_cores()) args.push_back("--oversubscribe");
    args.push_back("--tag-output");
    for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
             {"OMP_NUM_THREADS", std::to_string(threads_per_worker())},
             {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
             {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options_.max_restarts)},
             {"TORCHELASTIC_RUN_ID", options_.run_id}}) {
      args.push_back("-x");
      args.push_back(key + "=" + value);
    }
    if (diagnostics_.status_line()) {
      args.push_back("-x");
      args.push_back(std::string(kStatusRelayVariable) + "=1");
    }
    args.insert(args.end(), options_.command.begin(), options_.command.end());
    return args;
  }

  Environment mpirun_environment() const {
    Environment env = options_.environment;
    // A launcher started from inside another torchrun job must not hand its rendezvous to MPI
    // ranks, which take their ranks from OpenMPI's variables.
    for (const char* key : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                            "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                            "TORCHELASTIC_ERROR_FILE", kStatusRelayVariable}) {
      env.erase(key);
    }
    env["OMP_NUM_THREADS"] = std::to_string(threads_per_worker());
    if (::geteuid() == 0) {
      env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
      env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
    }
    return env;
  }

  void stop_all(int signo) { signal_workers(workers_, signo); }

  void on_output(Worker& worker, bool is_stderr, std::string_view data) {
    if (demux_) {
      demux_->write(is_stderr, data);
      return;
    }
    RankLog& log = *logs_[static_cast<size_t>(worker.rank - first_rank())];
    if (is_stderr) {
      log.write_stderr(data);
    } else {
      log.write_stdout(data);
    }
  }

  void on_eof(Worker& worker, bool is_stderr) {
    if (demux_) {
      demux_->finish(is_stderr);
    } else {
      logs_[static_cast<size_t>(worker.rank - first_rank())]->finish(is_stderr);
    }
  }

  // Reads whatever is ready; returns false once the pipe is closed.
  bool pump(Worker& worker, int& fd, bool is_stderr) {
    char buffer[65536];
    while (true) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n > 0) {
        on_output(worker, is_stderr, std::string_view(buffer, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      on_eof(worker, is_stderr);
      ::close(fd);
      fd = -1;
      return false;
    }
  }

  std::string failure_report(const Worker& worker, int status) const {
    std::string report;
    if (demux_) {
      const std::optional<int> rank = demux_->reported_failed_rank();
      report =
          fmt::format("dtrain launch: {} (mpirun pid {}) {}\n",
                      rank ? fmt::format("rank {}", *rank) : "a rank", worker.pid, describe_status(status));
      if (rank && *rank >= 0 && *rank < static_cast<int>(logs_.size())) {
        report += tail_of(*logs_[*rank]);
      } else {
        report += fmt::format("mpirun did not say which rank; every rank's log is in {}\n", log_dir_);
      }
      return report;
    }
    const RankLog& log = *logs_[static_cast<size_t>(worker.rank - first_rank())];
    report =
        fmt::format("dtrain launch: rank {} (pid {}) {}\n", worker.rank, worker.pid, describe_status(status));
    report += tail_of(log);
    const std::string error = read_error_file(error_file(worker.rank));
    if (!error.empty())
      report += fmt::format("error file of rank {} ({}):\n{}\n", worker.rank, error_file(worker.rank), error);
    return report;
  }

  std::string tail_of(const RankLog& log) const {
    const auto lines = log.tail();
    if (lines.empty()) return fmt::format("(nothing in {})\n", log.path());
    std::string out = fmt::format("last {} lines of {}:\n", lines.size(), log.path());
    for (const auto& line : lines) out += "  " + line + "\n";
    return out;
  }

  // The poll loop of one attempt: output, exits, signals, and other nodes' failures, until every
  // worker is reaped and its pipes are drained.
  void monitor(int attempt, AttemptOutcome& outcome, bool already_stopping) {
    bool stopping = already_stopping;
    bool killed = false;
    bool failed = !outcome.failure.empty();
    Clock::time_point kill_at = Clock::now() + options_.stop_grace;
    std::optional<Clock::time_point> drain_until;
    Clock::time_point next_store_check = Clock::now();
    const bool multi_node = store_ && store_->shared();
    const Worker* mpirun_failure = nullptr;

    auto begin_stop = [&](int signo) {
      if (!stopping) {
        stopping = true;
        kill_at = Clock::now() + options_.stop_grace;
      }
      stop_all(signo);
    };

    while (true) {
      std::vector<pollfd> fds;
      std::vector<std::pair<size_t, bool>> owners;  // (worker, is_stderr)
      for (size_t i = 0; i < workers_.size(); ++i) {
        if (workers_[i].out_fd >= 0) {
          fds.push_back({workers_[i].out_fd, POLLIN, 0});
          owners.emplace_back(i, false);
        }
        if (workers_[i].err_fd >= 0) {
          fds.push_back({workers_[i].err_fd, POLLIN, 0});
          owners.emplace_back(i, true);
        }
      }
      const bool all_exited =
          std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exited; });
      if (all_exited && fds.empty()) break;
      fds.push_back({signals_.fd(), POLLIN, 0});
      // Exits are noticed by polling waitpid, so the wait is short.
      const int ready = ::poll(fds.data(), fds.size(), 50);
      if (ready > 0) {
        for (size_t i = 0; i + 1 < fds.size(); ++i) {
          if (fds[i].revents == 0) continue;
          auto& worker = workers_[owners[i].first];
          pump(worker, owners[i].second ? worker.err_fd : worker.out_fd, owners[i].second);
        }
      }

      if (const int signo = signals_.take()) {
        if (!outcome.signal) {
          outcome.signal = signo;
          outcome.exit_code = 128 + signo;
          outcome.failure =
              fmt::format("dtrain launch: received {}, stopping all workers\n", signal_name(signo));
          say(outcome.failure);  // now, not after the grace period
          begin_stop(signo);
        } else {
          // A second signal: the user does not want to wait for the grace period.
          stop_all(SIGKILL);
          killed = true;
        }
      }

      for (auto& worker : workers_) {
        if (worker.exited) continue;
        const std::optional<int> status = exit_status(worker.pid);
        if (!status) continue;
        worker.exited = true;
        worker.status = *status;
        const bool ok = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
        if (!ok && !failed && !stopping) {
          failed = true;
          // Read what the worker wrote before dying, so the tail quoted is complete.
          if (worker.out_fd >= 0) pump(worker, worker.out_fd, false);
          if (worker.err_fd >= 0) pump(worker, worker.err_fd, true);
          outcome.exit_code = exit_code_of(*status);
          if (demux_) {
            // mpirun's own account of which rank failed may still be in its pipes: reported below,
            // once they are drained.
            mpirun_failure = &worker;
          } else {
            outcome.failed_rank = worker.rank;
            outcome.failure = failure_report(worker, *status);
          }
          if (multi_node) announce_failure(attempt, worker.rank, outcome.exit_code);
          begin_stop(SIGTERM);
        }
      }

      if (multi_node && !stopping && Clock::now() >= next_store_check) {
        next_store_check = Clock::now() + std::chrono::milliseconds(200);
        if (auto peer = store_->failure(attempt)) {
          failed = true;
          outcome.exit_code = peer->exit_code;
          outcome.failed_rank = peer->rank;
          outcome.failure = fmt::format(
              "dtrain launch: rank {} on another node failed with exit code {}; stopping "
              "this node's workers\n",
              peer->rank, peer->exit_code);
          begin_stop(SIGTERM);
        }
      }

      if (stopping && !killed && Clock::now() >= kill_at) {
        stop_all(SIGKILL);
        killed = true;
      }
      const bool now_all_exited =
          std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exited; });
      if (now_all_exited) {
        // A worker's own children may still hold its pipes: they get a moment, then the group is killed.
        if (!drain_until) drain_until = Clock::now() + std::chrono::seconds(1);
        if (Clock::now() >= *drain_until) {
          stop_all(SIGKILL);
          for (auto& worker : workers_) {
            for (bool is_stderr : {false, true}) {
              int& fd = is_stderr ? worker.err_fd : worker.out_fd;
              if (fd >= 0) pump(worker, fd, is_stderr);
              if (fd >= 0) {
                on_eof(worker, is_stderr);
                ::close(fd);
                fd = -1;
              }
            }
          }
        }
      }
    }
    if (mpirun_failure) {
      outcome.failed_rank = demux_->reported_failed_rank();
      outcome.failure = failure_report(*mpirun_failure, mpirun_failure->status);
    }
    // No orphans: whatever a worker left behind in its group goes with it. Only then are the
    // zombies reaped, which frees their pids (and so their process group ids) for reuse.
    stop_all(SIGKILL);
    reap(workers_);
    if (!failed && !outcome.signal) {
      outcome.succeeded = true;
      outcome.exit_code = 0;
    }
  }

  void announce_failure(int attempt, int rank, int exit_code) {
    try {
      store_->announce_failure(attempt, NodeFailure{rank, exit_code});
    } catch (const std::exception& e) {
      say(fmt::format("dtrain launch: could not tell the other nodes about the failure: {}\n", e.what()));
    }
  }

  const LaunchOptions& options_;
  SignalForwarding& signals_;
  pid_t launcher_pid_;
  Diagnostics diagnostics_;
  std::string log_dir_;
  std::unique_ptr<NodeStore> store_;  // none under mpirun, which brings its own rendezvous
  std::vector<std::unique_ptr<RankLog>> logs_;
  std::vector<Worker> workers_;
  std::unique_ptr<MpiOutputDemux> demux_;
};

void validate(const LaunchOptions& o) {
  auto fail = [](const std::string& message) { throw std::invalid_argument("dtrain launch: " + message); };
  if (o.command.empty() || o.command.front().empty()) {
    fail(
        "expected a command to run after '--', found none; e.g. dtrain launch --nproc-per-node 2 -- ./train");
  }
  if (o.nproc_per_node < 1) {
    fail(fmt::format("--nproc-per-node must be at least 1, found {}", o.nproc_per_node));
  }
  if (o.nnodes < 1) fail(fmt::format("--nnodes must be at least 1, found {}", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail(fmt::format("--node-rank must be in [0, {}) for --nnodes {}, found {}", o.nnodes, o.nnodes,
                     o.node_rank));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    fail(fmt::format("--master-port must be in [0, 65535], found {}", o.master_port));
  }
  if (o.max_restarts < 0) fail(fmt::format("--max-restarts must be at least 0, found {}", o.max_restarts));
  if (o.threads < 0)
    fail(fmt::format("--threads must be at least 0 (0 = cores / ranks), found {}", o.threads));
  if (o.backend != "gloo" && o.backend != "mpi" && o.backend != "nccl") {
    fail(fmt::format("--backend must be gloo, nccl or mpi, found '{}'", o.backend));
  }
  if (o.backend == "mpi" && o.nnodes > 1) {
    fail(
        fmt::format("--backend mpi runs mpirun on this node only, found --nnodes {}; for several hosts run "
                    "mpirun with a hostfile directly",
                    o.nnodes));
  }
  if (o.nnodes > 1 && o.backend != "mpi") {
    if (o.master_port == 0) {
      fail(fmt::format("a job over {} nodes needs an agreed --master-port on every node, found none",
                       o.nnodes));
    }
  }
  if (o.master_addr.empty()) fail("--master-addr must not be empty");
  if (o.stop_grace.count() < 0 || o.rendezvous_timeout.count() <= 0) {
    fail("the stop grace period must be at least 0 and the rendezvous timeout positive");
  }
}

}  // namespace

LaunchResult launch(const LaunchOptions& options) {
  validate(options);
  SignalForwarding signals;
  Launcher launcher(options, signals);
  return launcher.run();
}

}  // namespace dtrain::launch
