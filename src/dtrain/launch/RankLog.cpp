// RankLog: lines are cut at '\n' per stream; a stderr line that begins with '\r' is a relayed
// status where the launcher draws one, and output like any other line where it does not.
#include "dtrain/launch/RankLog.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "dtrain/launch/WriteAll.h"

namespace dtrain::launch {

RankLog::RankLog(int rank, std::string path, int output_fd, Diagnostics& diagnostics, size_t tail_lines)
    : rank_(rank),
      path_(std::move(path)),
      output_fd_(output_fd),
      diagnostics_(diagnostics),
      tail_lines_(std::max<size_t>(1, tail_lines)) {
  log_fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd_ < 0) {
    throw std::invalid_argument(
        fmt::format("dtrain launch: cannot write the log {}: {}; choose a writable --log-dir", path_,
                    std::strerror(errno)));
  }
}

RankLog::~RankLog() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void RankLog::begin_attempt(int attempt) {
  tail_.clear();
  partial_[0].clear();
  partial_[1].clear();
  if (attempt > 0) write_all(log_fd_, fmt::format("--- dtrain launch: restart {} ---\n", attempt));
}

void RankLog::write_stdout(std::string_view data) {
  write_all(log_fd_, data);
  if (output_fd_ >= 0) write_all(output_fd_, data);
  split_lines(0, data);
}

void RankLog::write_stderr(std::string_view data) {
  split_lines(1, data);
}

void RankLog::finish(bool is_stderr) {
  std::string& partial = partial_[is_stderr ? 1 : 0];
  if (!partial.empty()) complete_line(is_stderr, std::move(partial));
  partial.clear();
}

void RankLog::split_lines(int stream, std::string_view data) {
  std::string& partial = partial_[stream];
  size_t start = 0;
  for (size_t newline; (newline = data.find('\n', start)) != std::string_view::npos; start = newline + 1) {
    partial.append(data.substr(start, newline - start));
    complete_line(stream == 1, std::move(partial));
    partial.clear();
  }
  partial.append(data.substr(start));
}

void RankLog::complete_line(bool is_stderr, std::string line) {
  if (is_stderr) {
    // A status only where the launcher asked for them: another program's '\r' lines are output.
    if (diagnostics_.status_line() && !line.empty() && line.front() == '\r') {
      diagnostics_.set_status(line.substr(1));
      return;
    }
    write_all(log_fd_, line + "\n");
    // Workers that already say who they are (the "[rank r/N]" convention) are not prefixed twice.
    const bool tagged = line.rfind("[rank ", 0) == 0;
    diagnostics_.write(tagged ? line + "\n" : fmt::format("[rank {}] {}\n", rank_, line));
  }
  tail_.push_back(std::move(line));
  if (tail_.size() > tail_lines_) tail_.pop_front();
}

}  // namespace dtrain::launch
