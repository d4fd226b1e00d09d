// The terminal (stderr) shared by the logger and the progress bar: on a terminal the progress bar
// owns one redrawn status line, and log lines are printed above it instead of through it.
#pragma once

#include <memory>
#include <mutex>
#include <ostream>
#include <string>

namespace dtrain::io {

class Console {
 public:
  // `is_terminal` enables the redrawn status line; otherwise set_status prints nothing.
  Console(std::ostream& out, bool is_terminal);

  // std::cerr, a terminal when file descriptor 2 is one.
  static std::shared_ptr<Console> standard_error();

  bool is_terminal() const { return is_terminal_; }

  // Prints a full line (a newline is added), keeping the status line below it.
  void write_line(const std::string& line);
  // Replaces the status line (terminal only).
  void set_status(const std::string& status);
  // Erases the status line; a later write_line no longer redraws it.
  void clear_status();

 private:
  void erase_status_locked();

  std::mutex mutex_;
  std::ostream& out_;
  bool is_terminal_;
  std::string status_;
};

}  // namespace dtrain::io
