// One rank's output: its log file, the tail quoted when it fails, and its stderr copied to the
// launcher's stderr line by line with a "[rank r] " prefix; rank 0's stdout passes through.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/launch/Diagnostics.h"

namespace dtrain::launch {

class RankLog {
 public:
  // output_fd: where this rank's stdout goes unchanged (rank 0's: the launcher's stdout), or -1.
  // Throws std::invalid_argument when the log cannot be written.
  RankLog(int rank, std::string path, int output_fd, Diagnostics& diagnostics, size_t tail_lines);
  ~RankLog();
  RankLog(const RankLog&) = delete;
  RankLog& operator=(const RankLog&) = delete;

  const std::string& path() const { return path_; }

  // A restart: the log says so, and the tail starts afresh.
  void begin_attempt(int attempt);

  // Rank 0's stdout reaches the launcher's stdout byte for byte (progress bars, the final JSON line).
  void write_stdout(std::string_view data);

  // Written to the log line by line, so that relayed status lines stay out of it.
  void write_stderr(std::string_view data);

  // The end of a stream: a last line without a newline still counts.
  void finish(bool is_stderr);

  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }

 private:
  void split_lines(int stream, std::string_view data);
  void complete_line(bool is_stderr, std::string line);

  int rank_;
  std::string path_;
  int output_fd_;
  Diagnostics& diagnostics_;
  size_t tail_lines_;
  int log_fd_ = -1;
  std::deque<std::string> tail_;
  std::string partial_[2];  // stdout, stderr: a line not yet ended
};

}  // namespace dtrain::launch
