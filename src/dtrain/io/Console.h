// The terminal (stderr) shared by the logger and the progress bar: on a terminal the progress bar
// owns one redrawn status line, and log lines are printed above it instead of through it. Under
// `dtrain launch` on a terminal, stderr is a pipe to the launcher: the status travels as a line
// that begins with '\r' and the launcher draws it (relay mode).
#pragma once

#include <memory>
#include <mutex>
#include <ostream>
#include <string>

namespace dtrain::io {

class Console {
 public:
  enum class Mode {
    Plain,     // set_status prints nothing
    Terminal,  // the status line is redrawn in place with carriage return and erase-line
    Relay,     // each status is a line "\r<status>" (an empty one clears) for a launcher to draw
  };
  Console(std::ostream& out, Mode mode);
  Console(std::ostream& out, bool is_terminal) : Console(out, is_terminal ? Mode::Terminal : Mode::Plain) {}

  // std::cerr: Terminal when file descriptor 2 is one, else Relay when `relay_status` (the
  // launcher asked for it: launch::status_relay_requested(), DTRAIN_STATUS_RELAY=1), else Plain.
  // io reads no environment variable: the caller (cli/) does and passes the answer in.
  static std::shared_ptr<Console> standard_error(bool relay_status);

  // Whether a status line is shown somewhere (Terminal or Relay).
  bool is_terminal() const { return mode_ != Mode::Plain; }

  // Prints a full line (a newline is added), keeping the status line below it.
  void write_line(const std::string& line);
  // Replaces the status line (terminal only).
  void set_status(const std::string& status);
  // Erases the status line; a later write_line no longer redraws it.
  void clear_status();

 private:
  std::mutex mutex_;
  std::ostream& out_;
  Mode mode_;
  std::string status_;
};

}  // namespace dtrain::io
