// The status line with ANSI carriage return and erase-line: each line erases the status, prints,
// and draws it again.
#include "dtrain/launch/Diagnostics.h"

#include "dtrain/launch/WriteAll.h"

namespace dtrain::launch {

void Diagnostics::write(const std::string& text) {
  if (fd_ < 0) return;
  if (status_.empty()) {
    write_all(fd_, text);
  } else {
    write_all(fd_, "\r\033[K" + text + status_);
  }
}

void Diagnostics::set_status(const std::string& status) {
  if (fd_ < 0) return;
  if (status.empty() && status_.empty()) return;
  status_ = status;
  write_all(fd_, "\r\033[K" + status_);
}

void Diagnostics::end_status() {
  if (fd_ < 0 || status_.empty()) return;
  write_all(fd_, "\n");
  status_.clear();
}

}  // namespace dtrain::launch
