// The launcher behind `dtrain launch`: the options checked, the log directory and one RankLog per
// local rank, the store hosted (or joined), and attempts run until one succeeds or the restarts
// run out. How one attempt starts and watches its workers is in Attempt.cpp and Monitor.cpp.
#include "dtrain/launch/Launcher.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/rendezvous/HostName.h"
#include "dtrain/comm/store/StoreSecret.h"
#include "dtrain/launch/Attempt.h"
#include "dtrain/launch/Job.h"
#include "dtrain/launch/WorkerEnvironment.h"
#include "dtrain/util/Clock.h"

namespace dtrain::launch {
namespace {

namespace fs = std::filesystem;

// Whether `address` is a host name (not an IP address, not "localhost") whose every address on
// this host is a loopback one.
bool only_loopback_name(const std::string& address) {
  if (address == "localhost") return false;
  in6_addr ip{};
  if (::inet_pton(AF_INET, address.c_str(), &ip) == 1 || ::inet_pton(AF_INET6, address.c_str(), &ip) == 1) {
    return false;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(address.c_str(), nullptr, &hints, &found) != 0) return false;
  bool all_loopback = found != nullptr;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      all_loopback &= (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      all_loopback &= IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr) != 0;
    }
  }
  ::freeaddrinfo(found);
  return all_loopback;
}

void validate(const LaunchOptions& o) {
  auto fail = [](const std::string& message) { throw std::invalid_argument("dtrain launch: " + message); };
  if (o.command.empty() || o.command.front().empty()) {
    fail(
        "expected a command to run after '--', found none; e.g. dtrain launch --nproc-per-node 2 -- ./train");
  }
  if (o.nproc_per_node < 1) {
    fail(fmt::format("--nproc-per-node must be at least 1, found {}", o.nproc_per_node));
  }
  check_local_workers(o.nproc_per_node, o.oversubscribe);
  if (o.nnodes < 1) fail(fmt::format("--nnodes must be at least 1, found {}", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    fail(fmt::format("--node-rank must be in [0, {}) for --nnodes {}, found {}", o.nnodes, o.nnodes,
                     o.node_rank));
  }
  if (o.master_port < 0 || o.master_port > 65535) {
    fail(fmt::format("--master-port must be in [0, 65535], found {}", o.master_port));
  }
  if (o.max_restarts < 0) fail(fmt::format("--max-restarts must be at least 0, found {}", o.max_restarts));
  if (o.elastic()) {
    if (o.min_nnodes > o.nnodes)
      fail(fmt::format("--nnodes {}:{}: MIN is above MAX", o.min_nnodes, o.nnodes));
    if (o.backend == "mpi") {
      fail(
          "--nnodes MIN:MAX: Open MPI cannot shrink or grow a running job (its world is fixed at mpirun's "
          "start); elastic jobs run --backend gloo");
    }
    if (o.backend == "nccl") {
      fail(
          "--nnodes MIN:MAX: a member lost in an NCCL collective leaves the others' communicators hung, "
          "which "
          "dtrain does not abort; elastic jobs run --backend gloo");
    }
    if (o.nnodes > 1 && o.master_port == 0) {
      fail(fmt::format(
          "an elastic job of up to {} nodes needs an agreed --master-port on every node, found none",
          o.nnodes));
    }
  }
  if (o.threads < 0)
    fail(fmt::format("--threads must be at least 0 (0 = cores / ranks), found {}", o.threads));
  if (o.backend != "gloo" && o.backend != "mpi" && o.backend != "nccl") {
    fail(fmt::format("--backend must be gloo, nccl or mpi, found '{}'", o.backend));
  }
  if (o.backend == "mpi" && !o.secret_file.empty()) {
    fail(fmt::format(
        "a secret file ({}) guards the rendezvous store, which --backend mpi does not use (mpirun starts and "
        "connects the ranks itself); use the gloo backend, or drop --secret-file and DTRAIN_SECRET_FILE",
        o.secret_file));
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
    // The store listens on --master-addr only. A host name that resolves to loopback here (Debian
    // maps its own name to 127.0.1.1) would put it where no other node can reach it.
    if (o.node_rank == 0 && only_loopback_name(o.master_addr)) {
      fail(fmt::format(
          "--master-addr {} resolves to a loopback address on this host, where the rendezvous store would "
          "listen out of the other nodes' reach; give node 0's address as the other nodes reach it (e.g. "
          "its IP address)",
          o.master_addr));
    }
  }
  if (o.master_addr.empty()) fail("--master-addr must not be empty");
  if (const auto why = comm::unresolvable_host(o.master_addr); !why.empty()) {
    fail(fmt::format("cannot resolve --master-addr '{}' ({}); give a name or address this machine resolves",
                     o.master_addr, why));
  }
  if (o.stop_grace.count() < 0 || o.rendezvous_timeout.count() <= 0) {
    fail("the stop grace period must be at least 0 and the rendezvous timeout positive");
  }
}

// --log-dir, created if needed, or a fresh directory under $TMPDIR.
std::string prepare_log_dir(const LaunchOptions& options) {
  std::error_code ec;
  if (!options.log_dir.empty()) {
    fs::create_directories(options.log_dir, ec);
    if (ec) {
      throw std::invalid_argument(
          fmt::format("dtrain launch: cannot create the log directory {}: {}; choose a writable --log-dir",
                      options.log_dir, ec.message()));
    }
    return fs::absolute(options.log_dir).lexically_normal().string();
  }
  const auto tmp = options.environment.find("TMPDIR");
  std::string base = tmp != options.environment.end() && !tmp->second.empty() ? tmp->second : "/tmp";
  std::string pattern = base + "/dtrain-launch-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::invalid_argument(
        fmt::format("dtrain launch: cannot create a log directory under {}: {}; set TMPDIR or --log-dir",
                    base, std::strerror(errno)));
  }
  return pattern;
}

bool draws_status_line(const LaunchOptions& options) {
  return options.status_line.value_or(options.diagnostics_fd >= 0 && ::isatty(options.diagnostics_fd));
}

class Launcher {
 public:
  Launcher(const LaunchOptions& options, SignalForwarding& signals)
      : diagnostics_(options.diagnostics_fd, draws_status_line(options)),
        job_{options, signals, diagnostics_} {
    job_.launcher_pid = ::getpid();
    job_.first_rank = first_rank(options);
  }

  LaunchResult run() {
    LaunchResult result;
    prepare();
    result.log_dir = job_.log_dir;
    const HostShare mine{shared_cores_id(), local_workers(job_.options)};
    const auto shares = host_shares(mine);
    if (!shares) {
      result.signal = job_.signals.take();
      result.exit_code = 128 + *result.signal;
      result.failure =
          fmt::format("dtrain launch: received {} before the workers started\n", signal_name(*result.signal));
      diagnostics_.write(result.failure);
      return result;
    }
    job_.threads = threads_per_worker(job_.options, usable_cores(), mine.cores, *shares);
    const int max_restarts = job_.options.max_restarts;
    for (int attempt = 0;; ++attempt) {
      const AttemptOutcome outcome = run_attempt(job_, attempt);
      diagnostics_.end_status();
      result.restarts = attempt;
      result.exit_code = outcome.exit_code;
      result.failed_rank = outcome.failed_rank;
      result.failure = outcome.failure;
      result.signal = outcome.signal;
      if (outcome.succeeded) {
        // An elastic job's nodes come and go; its workers agree on its end among themselves.
        if (!job_.options.elastic()) exit_barrier(attempt);
        return result;
      }
      if (!outcome.signal) diagnostics_.write(outcome.failure);
      // An elastic job replaced its failed workers one by one already (Monitor): a failure that
      // ends it ends the job.
      if (outcome.signal || !outcome.retryable || attempt >= max_restarts || job_.options.elastic())
        return result;
      diagnostics_.write(fmt::format("dtrain launch: restarting all workers (restart {} of {})\n",
                                     attempt + 1, max_restarts));
    }
  }

 private:
  // The log directory with a log per rank this node carries output for, and, unless mpirun brings
  // its own rendezvous, the store.
  void prepare() {
    const LaunchOptions& options = job_.options;
    job_.log_dir = prepare_log_dir(options);
    diagnostics_.write(fmt::format("dtrain launch: logs in {}\n", job_.log_dir));
    const bool mpi = options.backend == "mpi";
    // With mpirun this node runs every rank; otherwise its own ranks.
    const int local_ranks = mpi ? options.nnodes * options.nproc_per_node : options.nproc_per_node;
    for (int r = job_.first_rank; r < job_.first_rank + local_ranks; ++r) {
      job_.logs.push_back(std::make_unique<RankLog>(r, fmt::format("{}/rank_{}.log", job_.log_dir, r),
                                                    r == 0 ? options.output_fd : -1, diagnostics_,
                                                    static_cast<size_t>(options.tail_lines)));
    }
    if (mpi) return;
    // Node 0 hosts the store like torchrun's agent; the workers join it as clients under the
    // prefix of their attempt. Other nodes join it too, to hear of a failure on another node.
    job_.store = std::make_unique<NodeStore>(options);
    if (options.node_rank == 0) {
      diagnostics_.write(
          fmt::format("dtrain launch: rendezvous store at {}:{}\n", options.master_addr, job_.store->port()));
    }
  }

  // Every node's share of its host (see Note [Launchers that share a host]), this node's said
  // first: once every node has said its share, or for an elastic job those said by now. Nullopt
  // when a signal came first, left for the caller to take.
  std::optional<std::vector<HostShare>> host_shares(const HostShare& mine) {
    NodeStore* store = job_.store.get();
    if (store == nullptr || !store->shared()) return std::vector<HostShare>{mine};
    const LaunchOptions& options = job_.options;
    std::vector<std::optional<HostShare>> said(static_cast<size_t>(options.nnodes));
    std::vector<int> missing;
    const auto deadline = util::Clock::now() + options.rendezvous_timeout;
    try {
      store->register_share(options.node_rank, mine);
      for (;;) {
        missing.clear();
        for (int node = 0; node < options.nnodes; ++node) {
          auto& share = said[static_cast<size_t>(node)];
          if (!share) share = store->share_of(node);
          if (!share) missing.push_back(node);
        }
        if (missing.empty() || options.elastic() || util::Clock::now() >= deadline) break;
        if (signal_pending()) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const std::exception& e) {
      // Node 0's launcher, and with it the store, is gone.
      throw std::runtime_error(
          fmt::format("dtrain launch: lost the rendezvous store at {}:{} before the "
                      "workers started: {}",
                      options.master_addr, store->port(), e.what()));
    }
    if (!missing.empty() && !options.elastic()) {
      throw std::runtime_error(fmt::format(
          "dtrain launch: node(s) {} of --nnodes {} did not join within the rendezvous timeout ({} s); start "
          "every node with the same --nnodes, --master-addr and --master-port, or give a longer --timeout",
          fmt::join(missing, ", "), options.nnodes,
          std::chrono::duration_cast<std::chrono::seconds>(options.rendezvous_timeout).count()));
    }
    std::vector<HostShare> shares;
    for (const auto& share : said) {
      if (share) shares.push_back(*share);
    }
    return shares;
  }

  // Whether a signal waits to be taken, without taking it.
  bool signal_pending() const {
    pollfd fd{job_.signals.fd(), POLLIN, 0};
    return ::poll(&fd, 1, 0) > 0 && (fd.revents & POLLIN) != 0;
  }

  // Note [Exit barrier]
  // Node 0 hosts the store, and the other nodes' launchers take its end for the end of the job:
  // a failure on node 0 (NodeStore::failure). So node 0 must not leave while another node's
  // workers still run, or a node whose workers are only slower to exit than node 0's would stop
  // them and fail a job that succeeded. As torchrun's agents do, every node whose workers all
  // succeeded says so in the store, and node 0 waits for every node before it returns: until a
  // failure is announced (that node reports it), a signal, or the rendezvous timeout.
  void exit_barrier(int attempt) {
    NodeStore* store = job_.store.get();
    if (store == nullptr || !store->shared()) return;
    const LaunchOptions& options = job_.options;
    try {
      store->announce_done(attempt, options.node_rank);
      if (options.node_rank != 0) return;
      const auto deadline = util::Clock::now() + options.rendezvous_timeout;
      while (!store->all_done(attempt, options.nnodes)) {
        if (const auto peer = store->failure(attempt)) {
          diagnostics_.write(fmt::format(
              "dtrain launch: rank {} on another node failed with exit code {} after this node's workers "
              "finished\n",
              peer->rank, peer->exit_code));
          return;
        }
        if (job_.signals.take() != 0 || util::Clock::now() >= deadline) {
          diagnostics_.write(
              "dtrain launch: this node's workers finished; not waiting for the other nodes\n");
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const std::exception& e) {
      diagnostics_.write(
          fmt::format("dtrain launch: could not wait for the other nodes to finish: {}\n", e.what()));
    }
  }

  Diagnostics diagnostics_;
  Job job_;
};

}  // namespace

// See Note [A bound on local workers].
int max_local_workers() {
  return std::max(16, 4 * usable_cores());
}

void check_local_workers(int nproc, bool oversubscribe) {
  if (oversubscribe || nproc <= max_local_workers()) return;
  throw std::invalid_argument(fmt::format(
      "{} local workers are more than this host runs: at most {} (4 per usable core, at least 16; {} "
      "usable core(s) here); start fewer, or add --oversubscribe to start them anyway",
      nproc, max_local_workers(), usable_cores()));
}

bool status_relay_requested(const comm::Environment& env) {
  const auto relay = env.find(kStatusRelayVariable);
  return relay != env.end() && relay->second == "1";
}

namespace {

// Whether `program` names an executable file, directly or in one of PATH's directories.
bool runnable(const std::string& program, const comm::Environment& env) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const auto path = env.find("PATH");
  if (path == env.end()) return false;
  std::size_t start = 0;
  while (start <= path->second.size()) {
    const std::size_t colon = std::min(path->second.find(':', start), path->second.size());
    const std::string dir = path->second.substr(start, colon - start);
    if (!dir.empty() && ::access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    start = colon + 1;
  }
  return false;
}

}  // namespace

std::string start_method_for(const std::string& configured, int nproc, bool cuda,
                             const comm::Environment& env, const std::string& mpirun) {
  if (configured != "auto") return configured == "mpi" ? "mpi" : "gloo";
  comm::BackendLayout layout;
  layout.world_size = nproc;
  layout.local_world_size = nproc;
  layout.mpi_processes = runnable(mpirun, env);
  layout.cuda = cuda;
  layout.gpus = cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  return comm::choose_backend(layout).name == "mpi" ? "mpi" : "gloo";
}

LaunchResult launch(const LaunchOptions& given) {
  // Every launcher (dtrain launch, train --nproc, experiment, bench) takes the store's secret from
  // DTRAIN_SECRET_FILE when not given it, as its workers would: one rule for all.
  LaunchOptions options = given;
  if (const auto it = options.environment.find(comm::kSecretFileVariable);
      options.secret_file.empty() && it != options.environment.end() && !it->second.empty()) {
    options.secret_file = fs::absolute(it->second).string();
  }
  validate(options);
  SignalForwarding signals;
  Launcher launcher(options, signals);
  return launcher.run();
}

}  // namespace dtrain::launch
