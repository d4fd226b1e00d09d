// mpirun --tag-output writes "[<job>,<rank>]<stdout>:text"; MpiOutputDemux routes each line to
// its rank's log and passes mpirun's own lines (untagged) to the launcher's stderr, noting which
// rank mpirun names as the first to fail.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrain/launch/Diagnostics.h"
#include "dtrain/launch/RankLog.h"

namespace dtrain::launch {

class MpiOutputDemux {
 public:
  // logs[r] is rank r's: mpirun runs every rank on this node.
  MpiOutputDemux(std::vector<std::unique_ptr<RankLog>>& logs, Diagnostics& diagnostics)
      : logs_(logs), diagnostics_(diagnostics) {}

  // Bytes from mpirun's stdout (is_stderr false) or stderr.
  void write(bool is_stderr, std::string_view data);
  // The end of one of mpirun's streams: what it left unfinished is delivered.
  void finish(bool is_stderr);

  std::optional<int> reported_failed_rank() const { return failed_rank_; }

 private:
  struct Tag {
    size_t at = std::string::npos;
    size_t length = 0;
    int rank = 0;
    bool is_stdout = false;
  };

  Tag find_tag(const std::string& line, size_t from) const;
  void deliver(int rank, bool is_stdout, const std::string& text);
  void route(const std::string& line, bool complete);
  void own_line(const std::string& line);

  std::vector<std::unique_ptr<RankLog>>& logs_;
  Diagnostics& diagnostics_;
  std::string partial_[2];
  std::map<std::pair<int, bool>, std::string> pieces_;  // (rank, stdout?) -> a line not yet ended
  std::optional<int> failed_rank_;
};

}  // namespace dtrain::launch
