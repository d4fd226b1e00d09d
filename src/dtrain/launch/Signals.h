// Signals while a job runs: SIGINT, SIGTERM and SIGHUP to the launcher are forwarded to every
// worker. The handler only writes the signal number to a pipe that the poll loop watches.
#pragma once

#include <signal.h>

#include <iterator>
#include <string>

namespace dtrain::launch {

// The signals a launcher forwards to its workers (and that workers get back as SIG_DFL).
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// "SIGTERM", or "signal 64" for one without a name.
std::string signal_name(int signo);

// Installs the launcher's handlers for as long as it lives; the previous ones come back after.
// One at a time per process: the handlers are the process's.
class SignalForwarding {
 public:
  SignalForwarding();
  ~SignalForwarding();
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

  // Readable when a signal came.
  int fd() const { return pipe_[0]; }

  // The last signal received since the previous call, or 0.
  int take();

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction previous_[std::size(kForwardedSignals)]{};
  struct sigaction previous_pipe_ {};
  struct sigaction previous_child_ {};
};

}  // namespace dtrain::launch
