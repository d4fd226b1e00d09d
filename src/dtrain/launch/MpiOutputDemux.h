// mpirun --tag-output writes "[<job>,<rank>]<stdout>:text"; MpiOutputDemux routes each line to
// its rank's log and passes mpirun's own lines (untagged) to the launcher's stderr, noting which
// rank mpirun names as the first to fail. The process map of --display-map is read (which node
// runs each rank) and kept out of the launcher's stderr; so is whether mpirun lost a daemon of
// another node, which it sometimes reports without naming the node or a rank.
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
  // Rank -> the node mpirun's map put it on ("" where no map came).
  const std::map<int, std::string>& rank_nodes() const { return rank_nodes_; }
  // mpirun said it lost (or could not reach) the daemon of another node.
  bool daemon_lost() const { return daemon_lost_; }

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
  bool in_map_ = false;  // between --display-map's "Data for JOB" and its closing rule
  std::string map_node_;
  std::map<int, std::string> rank_nodes_;
  bool daemon_lost_ = false;
};

}  // namespace dtrain::launch
