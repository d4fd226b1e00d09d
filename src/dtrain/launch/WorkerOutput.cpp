// A pipe is read until it would block, so one busy worker cannot starve the others: the poll loop
// comes back to it.
#include "dtrain/launch/WorkerOutput.h"

#include <unistd.h>

#include <cerrno>

namespace dtrain::launch {

bool WorkerOutput::pump(Worker& worker, bool is_stderr) {
  int& fd = is_stderr ? worker.err_fd : worker.out_fd;
  if (fd < 0) return false;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      write(worker, is_stderr, std::string_view(buffer, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    close(worker, is_stderr);
    return false;
  }
}

void WorkerOutput::drain_and_close(Worker& worker, bool is_stderr) {
  if (pump(worker, is_stderr)) close(worker, is_stderr);
}

void WorkerOutput::write(const Worker& worker, bool is_stderr, std::string_view data) {
  if (demux_) {
    demux_->write(is_stderr, data);
  } else if (is_stderr) {
    job_.log_of(worker.rank).write_stderr(data);
  } else {
    job_.log_of(worker.rank).write_stdout(data);
  }
}

// The end of the stream: a last line without a newline still counts.
void WorkerOutput::close(Worker& worker, bool is_stderr) {
  int& fd = is_stderr ? worker.err_fd : worker.out_fd;
  if (demux_) {
    demux_->finish(is_stderr);
  } else {
    job_.log_of(worker.rank).finish(is_stderr);
  }
  ::close(fd);
  fd = -1;
}

}  // namespace dtrain::launch
