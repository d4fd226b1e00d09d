// Writing to a descriptor the launcher does not own (its stdout, stderr, a rank's log): all of
// the text, or as much as a closed pipe takes.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string_view>

namespace dtrain::launch {

inline void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    // A closed terminal or pipe (EPIPE, SIGPIPE is ignored while launching) must not stop the job.
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace dtrain::launch
