// Status-line handling with ANSI carriage return and erase-line, the codes every terminal knows.
#include "dtrain/io/Console.h"

#include <unistd.h>

#include <iostream>

namespace dtrain::io {

Console::Console(std::ostream& out, bool is_terminal) : out_(out), is_terminal_(is_terminal) {}

std::shared_ptr<Console> Console::standard_error() {
  return std::make_shared<Console>(std::cerr, ::isatty(STDERR_FILENO) == 1);
}

void Console::erase_status_locked() {
  if (is_terminal_ && !status_.empty()) out_ << "\r\033[K";
}

void Console::write_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(mutex_);
  erase_status_locked();
  out_ << line << '\n';
  if (is_terminal_ && !status_.empty()) out_ << status_;
  out_.flush();
}

void Console::set_status(const std::string& status) {
  if (!is_terminal_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  out_ << "\r\033[K" << status;
  out_.flush();
  status_ = status;
}

void Console::clear_status() {
  std::lock_guard<std::mutex> lock(mutex_);
  erase_status_locked();
  out_.flush();
  status_.clear();
}

}  // namespace dtrain::io
