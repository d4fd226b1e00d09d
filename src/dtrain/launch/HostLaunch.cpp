// `dtrain launch --hostfile`: one ssh per host, each running the multi-node `dtrain launch` there,
// their output streamed line by line with the host's name in front, and the stop of a job on
// every host. See Note [Stopping remote workers].
#include "dtrain/launch/HostLaunch.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "dtrain/launch/Signals.h"
#include "dtrain/launch/Spawn.h"
#include "dtrain/launch/WriteAll.h"
#include "dtrain/util/Clock.h"

namespace dtrain::launch {

// Note [Stopping remote workers]
// Killing the local ssh client does not stop what it started: without a terminal, sshd sends the
// remote command no SIGHUP when the connection goes (and `ssh -tt` would give every worker a
// terminal and mix its stderr into stdout). So, like the distributed-optimizer study's stop_distributed.sh,
// every host records the pid of its `dtrain launch` under the job's id, and a stop is a second ssh per host
// that sends that launcher SIGTERM: the launcher forwards it to its workers, waits its grace
// period and kills what is left, as it does for Ctrl-C at a terminal. The pid is checked against
// the launcher's command line (--run-id JOB) before it is signalled, so a pid file left by a host
// that rebooted cannot kill an unrelated process. A failure, a signal to this process, and
// `--stop JOB` all stop a job this way.

namespace {

using util::Clock;

bool safe_shell_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("_./:=@%+,-").find(c) != std::string_view::npos;
}

// The host part of a destination for the others to reach it: "alice@node1" -> "node1".
std::string address_of(const std::string& destination) {
  const auto at = destination.rfind('@');
  return at == std::string::npos ? destination : destination.substr(at + 1);
}

// One ssh to one host and what it has written so far.
struct Remote {
  std::string host;
  int node = 0;
  Worker process;
  std::string pending[2];  // a partial line of stdout, stderr
  std::string last_error;  // the last line on stderr, for a report
  // Whether anything but ssh's own complaints ("ssh: connect to host ...") came back: the remote
  // command may have started.
  bool remote_spoke = false;
  std::optional<int> status;
  bool done() const { return status && process.out_fd < 0 && process.err_fd < 0; }
};

class Session {
 public:
  explicit Session(const HostLaunchOptions& options) : options_(options), launcher_pid_(::getpid()) {
    const auto ssh = find_program(options.ssh, options.environment);
    if (!ssh) {
      throw std::invalid_argument(fmt::format(
          "dtrain launch: '{}' is not in PATH; --hostfile starts workers over ssh: install openssh-client",
          options.ssh));
    }
    ssh_ = *ssh;
  }

  // ssh HOST COMMAND, with stdin from /dev/null (-n) and no password prompt (BatchMode, which a
  // user's -o BatchMode=no before it overrides: ssh takes the first value of an option).
  Remote start(int node, const std::string& command) const {
    const Host& host = options_.hosts[static_cast<size_t>(node)];
    std::vector<std::string> args{ssh_, "-n"};
    args.insert(args.end(), options_.ssh_options.begin(), options_.ssh_options.end());
    args.insert(args.end(), {"-o", "BatchMode=yes", "--", host.name, command});
    auto spawned = spawn(ssh_, args, options_.environment, launcher_pid_);
    if (const auto* error = std::get_if<SpawnError>(&spawned)) {
      throw std::runtime_error(fmt::format("dtrain launch: cannot run {} for host '{}': {}", ssh_, host.name,
                                           std::strerror(error->error)));
    }
    Remote remote;
    remote.host = host.name;
    remote.node = node;
    remote.process = std::get<Worker>(spawned);
    return remote;
  }

  // Waits up to `timeout` for output, exits or a signal (signal_fd, -1 for none), and handles what
  // came. Returns true when signal_fd became readable.
  bool poll_once(std::vector<Remote>& remotes, std::chrono::milliseconds timeout, int signal_fd) const {
    std::vector<pollfd> fds;
    std::vector<std::pair<Remote*, int>> owners;
    for (auto& remote : remotes) {
      for (int stream = 0; stream < 2; ++stream) {
        const int fd = stream == 0 ? remote.process.out_fd : remote.process.err_fd;
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(&remote, stream);
      }
    }
    if (signal_fd >= 0) fds.push_back({signal_fd, POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    bool signalled = false;
    if (ready > 0) {
      for (size_t i = 0; i < owners.size(); ++i) {
        if (fds[i].revents != 0) pump(*owners[i].first, owners[i].second);
      }
      signalled = signal_fd >= 0 && (fds.back().revents & POLLIN) != 0;
    }
    for (auto& remote : remotes) {
      if (!remote.status) remote.status = exit_status(remote.process.pid);
    }
    return signalled;
  }

  // Stops job_id on the hosts of `nodes` (Note [Stopping remote workers]); returns the nodes
  // that could not be reached.
  std::vector<int> stop(const std::vector<int>& nodes, const std::string& job_id) const {
    std::vector<Remote> stops;
    for (int node : nodes)
      stops.push_back(start(node, remote_stop_command(job_id, node, options_.stop_grace)));
    const auto deadline = Clock::now() + options_.stop_grace + std::chrono::seconds(30);
    while (!all_done(stops) && Clock::now() < deadline) poll_once(stops, std::chrono::milliseconds(100), -1);
    std::vector<int> unreached;
    for (auto& remote : stops) {
      if (!remote.status) {
        ::kill(-remote.process.pid, SIGKILL);
        remote.status = W_EXITCODE(255, 0);
      }
      close_pipes(remote);
      if (exit_code_of(*remote.status) != 0) {
        diagnose(remote, "could not stop the job there");
        unreached.push_back(remote.node);
      }
    }
    reap(processes(stops));
    return unreached;
  }

  void diagnose(const Remote& remote, const std::string& what) const {
    const int code = exit_code_of(*remote.status);
    std::string message =
        code == 255
            ? fmt::format("dtrain launch: host '{}' (node {}): ssh failed (exit 255){}: {}\n", remote.host,
                          remote.node, remote.last_error.empty() ? "" : ": " + remote.last_error, what)
            : fmt::format("dtrain launch: host '{}' (node {}) {}: {}\n", remote.host, remote.node,
                          describe_status(*remote.status), what);
    write_all(options_.diagnostics_fd, message);
  }

  static bool all_done(const std::vector<Remote>& remotes) {
    return std::all_of(remotes.begin(), remotes.end(), [](const Remote& r) { return r.done(); });
  }
  static std::vector<Worker> processes(const std::vector<Remote>& remotes) {
    std::vector<Worker> workers;
    for (const auto& r : remotes) workers.push_back(r.process);
    return workers;
  }
  // Flushes partial lines and closes what is still open (an ssh that exited may leave a pipe held
  // by a ProxyCommand).
  void close_pipes(Remote& remote) const {
    for (int stream = 0; stream < 2; ++stream) {
      int& fd = stream == 0 ? remote.process.out_fd : remote.process.err_fd;
      if (fd < 0) continue;
      pump(remote, stream);
      if (fd >= 0) {
        ::close(fd);
        fd = -1;
      }
      flush(remote, stream);
    }
  }

 private:
  void pump(Remote& remote, int stream) const {
    int& fd = stream == 0 ? remote.process.out_fd : remote.process.err_fd;
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n > 0) {
        remote.pending[stream].append(buffer, static_cast<size_t>(n));
        write_lines(remote, stream);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      ::close(fd);  // end of file or an error: nothing more comes
      fd = -1;
      flush(remote, stream);
      return;
    }
  }

  void write_lines(Remote& remote, int stream) const {
    std::string& pending = remote.pending[stream];
    std::string out;
    size_t begin = 0;
    for (size_t end; (end = pending.find('\n', begin)) != std::string::npos; begin = end + 1) {
      const std::string_view line(pending.data() + begin, end - begin);
      out += fmt::format("[{}] {}\n", remote.host, line);
      if (stream == 1 && !line.empty()) remote.last_error = std::string(line);
      if (!line.empty() && line.rfind("ssh: ", 0) != 0) remote.remote_spoke = true;
    }
    pending.erase(0, begin);
    if (!out.empty()) write_all(stream == 0 ? options_.output_fd : options_.diagnostics_fd, out);
  }

  void flush(Remote& remote, int stream) const {
    if (remote.pending[stream].empty()) return;
    remote.pending[stream] += '\n';
    write_lines(remote, stream);
  }

  const HostLaunchOptions& options_;
  pid_t launcher_pid_;
  std::string ssh_;
};

void check_hosts(const HostLaunchOptions& options) {
  if (options.hosts.empty()) throw std::invalid_argument("dtrain launch: --hostfile or -H named no hosts");
  check_job_id(options.job_id);
  const Host& first = options.hosts.front();
  for (const Host& host : options.hosts) {
    if (host.slots != first.slots) {
      throw std::invalid_argument(
          fmt::format("{}: host '{}' has {} slots but '{}' has {}; every host runs the same number of ranks "
                      "(dtrain launch "
                      "--nproc-per-node on each node)",
                      host.origin, host.name, host.slots, first.name, first.slots));
    }
  }
}

std::vector<int> all_nodes(const HostLaunchOptions& options) {
  std::vector<int> nodes(options.hosts.size());
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i] = static_cast<int>(i);
  return nodes;
}

}  // namespace

std::string shell_quote(const std::string& word) {
  if (!word.empty() && std::all_of(word.begin(), word.end(), safe_shell_char)) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string job_directory(const std::string& job_id) {
  return "$HOME/.dtrain/jobs/" + job_id;
}

std::string remote_launch_command(const HostLaunchOptions& options, int node) {
  const std::string pid_file = fmt::format("\"$d/node{}.pid\"", node);
  std::string launch = "env";
  for (const auto& [key, value] : options.environment) {
    for (const char* prefix : kForwardedPrefixes) {
      if (key.rfind(prefix, 0) == 0) launch += " " + shell_quote(key + "=" + value);
    }
  }
  const std::vector<std::string> node_flags{options.remote_dtrain,
                                            "launch",
                                            "--nnodes",
                                            std::to_string(options.hosts.size()),
                                            "--node-rank",
                                            std::to_string(node),
                                            "--nproc-per-node",
                                            std::to_string(options.hosts.front().slots),
                                            "--master-addr",
                                            address_of(options.hosts.front().name),
                                            "--master-port",
                                            std::to_string(options.master_port),
                                            "--run-id",
                                            options.job_id};
  for (const auto& word : node_flags) launch += " " + shell_quote(word);
  for (const auto& word : options.launch_flags) launch += " " + shell_quote(word);
  launch += " --";
  for (const auto& word : options.command) launch += " " + shell_quote(word);
  // The launcher runs in the background of this shell so that its pid is known before it ends;
  // the shell waits, removes the pid file and exits with the launcher's status.
  const std::string script = fmt::format(
      "d={dir}; mkdir -p \"$d\" && cd {wd} && {{ {launch} & p=$!; echo $p >{pid}; wait $p; s=$?; "
      "rm -f {pid}; rmdir \"$d\" 2>/dev/null; exit $s; }}",
      fmt::arg("dir", job_directory(options.job_id)), fmt::arg("wd", shell_quote(options.working_directory)),
      fmt::arg("launch", launch), fmt::arg("pid", pid_file));
  return "sh -c " + shell_quote(script);
}

std::string remote_stop_command(const std::string& job_id, int node, std::chrono::milliseconds grace) {
  // A job directory without this node's pid file is a launch that has begun here but not yet
  // recorded its pid (a stop right after the start, when another host failed at once): it gets
  // 2 s to appear. Then polls every 0.1 s for the grace period and 5 s more (the launcher's own
  // grace runs inside).
  const long long polls = (grace.count() + 5000) / 100;
  const std::string script = fmt::format(
      "f={dir}/node{node}.pid; n=0; "
      "while [ -d \"${{f%/*}}\" ] && [ ! -s \"$f\" ] && [ $n -lt 20 ]; do sleep 0.1; n=$((n+1)); done; "
      "if [ ! -s \"$f\" ]; then echo \"job {job}: not running here\"; exit 0; fi; "
      "p=$(cat \"$f\"); "
      "if ! tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q -- '--run-id {job} '; then "
      "rm -f \"$f\"; echo \"job {job}: not running here (removed a stale pid file)\"; exit 0; fi; "
      "kill -TERM $p; n=0; "
      "while kill -0 $p 2>/dev/null && [ $n -lt {polls} ]; do sleep 0.1; n=$((n+1)); done; "
      "if kill -0 $p 2>/dev/null; then kill -KILL $p; echo \"job {job}: killed its launcher (pid $p) after "
      "the grace period\"; else echo \"job {job}: stopped its launcher (pid $p) and workers\"; fi; "
      "rm -f \"$f\"; rmdir \"${{f%/*}}\" 2>/dev/null; exit 0",
      fmt::arg("dir", job_directory(job_id)), fmt::arg("node", node), fmt::arg("job", job_id),
      fmt::arg("polls", polls));
  return "sh -c " + shell_quote(script);
}

std::string new_job_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string id = fmt::format("{}-{}-{}", host, ::getpid(), static_cast<long long>(std::time(nullptr)));
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return id;
}

void check_job_id(const std::string& job_id) {
  const bool ok = !job_id.empty() && std::all_of(job_id.begin(), job_id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (!ok || job_id == "." || job_id == "..") {
    throw std::invalid_argument(fmt::format(
        "dtrain launch: a job id is letters, digits, '.', '_' and '-', found '{}'; choose another --job-id",
        job_id));
  }
}

int launch_on_hosts(const HostLaunchOptions& options) {
  check_hosts(options);
  Session session(options);
  SignalForwarding signals;
  const Host& first = options.hosts.front();
  write_all(
      options.diagnostics_fd,
      fmt::format(
          "dtrain launch: job {} on {} host(s) x {} rank(s), rendezvous at {}:{}; stop it from anywhere "
          "with: dtrain launch --hostfile FILE --stop {}\n",
          options.job_id, options.hosts.size(), first.slots, address_of(first.name), options.master_port,
          options.job_id));
  std::vector<Remote> remotes;
  for (int node : all_nodes(options))
    remotes.push_back(session.start(node, remote_launch_command(options, node)));

  int exit_code = 0;
  bool stopping = false;
  std::optional<Clock::time_point> kill_at;
  auto stop_everywhere = [&](const std::string& why) {
    stopping = true;
    write_all(options.diagnostics_fd,
              fmt::format("dtrain launch: {}; stopping job {} on every host\n", why, options.job_id));
    // A host whose ssh failed before anything ran there has nothing to stop, and would only fail again.
    std::vector<int> nodes;
    for (const auto& remote : remotes) {
      const bool never_connected =
          remote.status && exit_code_of(*remote.status) == 255 && !remote.remote_spoke;
      if (!never_connected) nodes.push_back(remote.node);
    }
    session.stop(nodes, options.job_id);
    // The job's ssh clients end when their launchers do; any still there after the grace period go.
    signal_workers(Session::processes(remotes), SIGTERM);
    kill_at = Clock::now() + options.stop_grace;
  };
  while (!Session::all_done(remotes)) {
    if (session.poll_once(remotes, std::chrono::milliseconds(200), signals.fd())) {
      if (const int signo = signals.take(); signo != 0) {
        if (stopping) {
          signal_workers(Session::processes(remotes), SIGKILL);
        } else {
          exit_code = 128 + signo;
          stop_everywhere(signal_name(signo));
        }
      }
    }
    for (auto& remote : remotes) {
      // An ssh that exited may leave its pipes to a child of its own; they are not waited for.
      if (remote.status && !remote.done()) session.close_pipes(remote);
      if (!stopping && remote.status && exit_code_of(*remote.status) != 0) {
        exit_code = exit_code_of(*remote.status);
        session.diagnose(remote, "the job failed there");
        stop_everywhere(fmt::format("host '{}' failed", remote.host));
      }
    }
    if (kill_at && Clock::now() >= *kill_at) {
      signal_workers(Session::processes(remotes), SIGKILL);
      kill_at.reset();
    }
  }
  reap(Session::processes(remotes));
  if (exit_code == 0) {
    write_all(options.diagnostics_fd,
              fmt::format("dtrain launch: job {} finished on every host\n", options.job_id));
  }
  return exit_code;
}

int stop_on_hosts(const HostLaunchOptions& options) {
  check_job_id(options.job_id);
  Session session(options);
  const auto unreached = session.stop(all_nodes(options), options.job_id);
  return unreached.empty() ? 0 : 1;
}

}  // namespace dtrain::launch
