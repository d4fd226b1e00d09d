// fork+exec of one worker. Between fork and execve the child of a process with threads (the
// store's) may only make async-signal-safe calls, so everything it needs is prepared before.
#include "dtrain/launch/Spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "dtrain/launch/Signals.h"

namespace dtrain::launch {
namespace {

// argv and envp as execve takes them, built in the parent.
struct ExecArguments {
  std::vector<std::string> env_strings;
  std::vector<char*> argv, envp;

  ExecArguments(const std::vector<std::string>& args, const comm::Environment& env) {
    env_strings.reserve(env.size());
    for (const auto& [key, value] : env) env_strings.push_back(key + "=" + value);
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(fmt::format("dtrain launch: pipe: {}", std::strerror(errno)));
  }
  return Pipe{fds[0], fds[1]};
}

// The child's side, from fork to execve: on failure it writes the errno to exec_status.
[[noreturn]] void exec_child(const std::string& program, ExecArguments& exec, const Pipe& out,
                             const Pipe& err, const Pipe& exec_status, pid_t launcher_pid) {
  // Async-signal-safe calls only from here to execve.
  ::setpgid(0, 0);  // its own process group: a stop reaches the worker's own children too
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher_pid) ::_exit(127);  // the launcher died before prctl took effect
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  for (int s : kForwardedSignals) ::sigaction(s, &action, nullptr);
  ::sigaction(SIGPIPE, &action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(out.write, STDOUT_FILENO);
  ::dup2(err.write, STDERR_FILENO);
  // Descriptors the launcher holds without O_CLOEXEC (the store's sockets) stay out of workers.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  ::execve(program.c_str(), exec.argv.data(), exec.envp.data());
  const int error = errno;
  (void)!::write(exec_status.write, &error, sizeof(error));
  ::_exit(127);
}

// The errno of the child's failed execve, or 0 once the exec succeeded (its end of the pipe closed).
int exec_error(int exec_status_fd) {
  int error = 0;
  ssize_t n;
  do {
    n = ::read(exec_status_fd, &error, sizeof(error));
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(error)) ? error : 0;
}

void wait_for(pid_t pid, int* status) {
  while (::waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

std::optional<std::string> find_program(const std::string& name, const comm::Environment& env) {
  // PATH lookup in the parent, with the workers' PATH: the child then only calls execve, which is
  // safe after fork in a process with threads (the store's), where execvp's allocations are not.
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return name;
  const auto it = env.find("PATH");
  const std::string path = it != env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return std::nullopt;
}

std::variant<Worker, SpawnError> spawn(const std::string& program, const std::vector<std::string>& args,
                                       const comm::Environment& env, pid_t launcher_pid) {
  ExecArguments exec(args, env);
  const Pipe out = make_pipe(), err = make_pipe(), exec_status = make_pipe();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("dtrain launch: fork: {}", std::strerror(errno)));
  if (pid == 0) exec_child(program, exec, out, err, exec_status, launcher_pid);
  ::setpgid(pid, pid);  // also here, so a stop right after fork already finds the group
  ::close(out.write);
  ::close(err.write);
  ::close(exec_status.write);
  const int error = exec_error(exec_status.read);
  ::close(exec_status.read);
  if (error != 0) {
    ::close(out.read);
    ::close(err.read);
    int status = 0;
    wait_for(pid, &status);
    return SpawnError{error};
  }
  ::fcntl(out.read, F_SETFL, O_NONBLOCK);
  ::fcntl(err.read, F_SETFL, O_NONBLOCK);
  Worker worker;
  worker.pid = pid;
  worker.out_fd = out.read;
  worker.err_fd = err.read;
  return worker;
}

std::optional<int> exit_status(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == ECHILD) return W_EXITCODE(1, 0);  // reaped behind our back: its fate is unknown
    return std::nullopt;
  }
  if (info.si_pid == 0) return std::nullopt;  // still running
  if (info.si_code == CLD_EXITED) return W_EXITCODE(info.si_status, 0);
  return info.si_status;  // CLD_KILLED or CLD_DUMPED: the terminating signal
}

void signal_workers(const std::vector<Worker>& workers, int signo) {
  for (const auto& worker : workers) ::kill(-worker.pid, signo);
}

void reap(const std::vector<Worker>& workers) {
  for (const auto& worker : workers) wait_for(worker.pid, nullptr);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by {} ({})", signal_name(WTERMSIG(status)), WTERMSIG(status));
  }
  return fmt::format("failed with exit code {}", exit_code_of(status));
}

}  // namespace dtrain::launch
