// The launcher's signal handlers: forwarded signals reach the poll loop through a pipe, SIGPIPE
// is ignored (a closed terminal must not stop the job), and SIGCHLD is left to waitpid.
#include "dtrain/launch/Signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::launch {
namespace {

std::atomic<int> g_signal_write_fd{-1};
std::atomic<bool> g_launch_running{false};

extern "C" void on_launcher_signal(int signo) {
  const int saved_errno = errno;
  const int fd = g_signal_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(signo);
    (void)!::write(fd, &byte, 1);
  }
  errno = saved_errno;
}

struct sigaction disposition(void (*handler)(int), int flags) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = flags;
  return action;
}

}  // namespace

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signo);
}

SignalForwarding::SignalForwarding() {
  if (g_launch_running.exchange(true)) {
    throw std::invalid_argument(
        "dtrain launch: launch() is already running in this process; it owns the process's "
        "SIGINT/SIGTERM handlers, so run one job at a time per process");
  }
  if (::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_launch_running = false;
    throw std::runtime_error(fmt::format("dtrain launch: pipe: {}", std::strerror(errno)));
  }
  g_signal_write_fd = pipe_[1];
  const struct sigaction forward = disposition(on_launcher_signal, SA_RESTART);
  for (size_t i = 0; i < std::size(kForwardedSignals); ++i) {
    sigaction(kForwardedSignals[i], &forward, &previous_[i]);
  }
  const struct sigaction ignore = disposition(SIG_IGN, 0);
  sigaction(SIGPIPE, &ignore, &previous_pipe_);
  // Workers are reaped with waitpid: an inherited SIGCHLD = SIG_IGN would reap them unseen.
  const struct sigaction child_default = disposition(SIG_DFL, 0);
  sigaction(SIGCHLD, &child_default, &previous_child_);
}

SignalForwarding::~SignalForwarding() {
  for (size_t i = 0; i < std::size(kForwardedSignals); ++i) {
    sigaction(kForwardedSignals[i], &previous_[i], nullptr);
  }
  sigaction(SIGPIPE, &previous_pipe_, nullptr);
  sigaction(SIGCHLD, &previous_child_, nullptr);
  g_signal_write_fd = -1;
  ::close(pipe_[0]);
  ::close(pipe_[1]);
  g_launch_running = false;
}

int SignalForwarding::take() {
  unsigned char buffer[16];
  int signo = 0;
  ssize_t n;
  while ((n = ::read(pipe_[0], buffer, sizeof(buffer))) > 0) signo = buffer[n - 1];
  return signo;
}

}  // namespace dtrain::launch
