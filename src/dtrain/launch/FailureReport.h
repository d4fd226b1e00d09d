// What the launcher says when a worker fails: which rank, how it ended, the tail of its log, and
// the root cause from its torchrun error file when it wrote one.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/launch/RankLog.h"

namespace dtrain::launch {

// "dtrain launch: rank 1 (pid 123) failed with exit code 3\n", the tail of its log, and what its
// error file at error_file says (if anything).
std::string rank_failure_report(int rank, pid_t pid, int status, const RankLog& log,
                                const std::string& error_file);

// What mpirun's own output said of a failure (MpiOutputDemux).
struct MpirunAccount {
  std::optional<int> failed_rank;         // the rank it named as the first to fail
  std::map<int, std::string> rank_nodes;  // its --display-map: rank -> node
  bool daemon_lost = false;               // it lost the daemon of another node
};

// mpirun ended with `status`: the rank mpirun named as the first to fail, if it named one (and its
// node), and the tail of its log; else, where mpirun lost a daemon, the nodes other than rank 0's
// with their ranks (mpirun does not always say which node); and where every rank's log is.
std::string mpirun_failure_report(const MpirunAccount& account, pid_t mpirun_pid, int status,
                                  const std::vector<std::unique_ptr<RankLog>>& logs,
                                  const std::string& log_dir);

// torchrun's error file: {"message": {"message": "<Type>: <msg>", "extraInfo": {"py_callstack": ...}}}
// or {"message": "<msg>"}. Anything else is quoted as it is; "" when there is none.
std::string read_error_file(const std::string& path);

}  // namespace dtrain::launch
