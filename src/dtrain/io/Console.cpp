// Status-line handling with ANSI carriage return and erase-line, the codes every terminal knows.
#include "dtrain/io/Console.h"

#include <unistd.h>

#include <iostream>

namespace dtrain::io {

Console::Console(std::ostream& out, Mode mode) : out_(out), mode_(mode) {}

std::shared_ptr<Console> Console::standard_error(bool relay_status) {
  if (::isatty(STDERR_FILENO) == 1) return std::make_shared<Console>(std::cerr, Mode::Terminal);
  return std::make_shared<Console>(std::cerr, relay_status ? Mode::Relay : Mode::Plain);
}

// Each call writes its whole text at once: std::cerr is unbuffered, and mpirun --tag-output tags
// every piece it reads, so a line written in pieces would reach the launcher cut up by tags.

void Console::write_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string text;
  // In relay mode the launcher erases its drawn status before each line itself.
  const bool redraw = mode_ == Mode::Terminal && !status_.empty();
  if (redraw) text += "\r\033[K";
  text += line;
  text += '\n';
  if (redraw) text += status_;
  out_ << text;
  out_.flush();
}

void Console::set_status(const std::string& status) {
  if (mode_ == Mode::Plain) return;
  std::lock_guard<std::mutex> lock(mutex_);
  out_ << (mode_ == Mode::Relay ? "\r" + status + "\n" : "\r\033[K" + status);
  out_.flush();
  status_ = status;
}

void Console::clear_status() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!status_.empty()) {
    if (mode_ == Mode::Relay) out_ << "\r\n";
    if (mode_ == Mode::Terminal) out_ << "\r\033[K";
  }
  out_.flush();
  status_.clear();
}

}  // namespace dtrain::io
