// The launcher's stderr: every rank's lines and the launcher's own reports, and, when it is a
// terminal, rank 0's status line (the progress bar) redrawn in place below them. A worker relays
// its status as a line that begins with '\r' (io::Console in relay mode); an empty one clears it.
#pragma once

#include <string>

namespace dtrain::launch {

class Diagnostics {
 public:
  // fd < 0: nowhere. status_line: whether relayed status lines are drawn (else they are output).
  Diagnostics(int fd, bool status_line) : fd_(fd), status_line_(status_line) {}

  bool status_line() const { return status_line_; }

  // Whole lines, printed above the status line.
  void write(const std::string& text);

  // A relayed status line (its '\r' removed); only while the launcher draws one.
  void set_status(const std::string& status);

  // Before the launcher's final reports: the last status stays on screen as a line of its own.
  void end_status();

 private:
  int fd_;
  bool status_line_;
  std::string status_;
};

}  // namespace dtrain::launch
