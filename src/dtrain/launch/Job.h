// What every attempt of one launch shares (options, logs, the status line, the store), and what
// one attempt comes to.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/launch/Diagnostics.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/launch/NodeStore.h"
#include "dtrain/launch/RankLog.h"
#include "dtrain/launch/Signals.h"

namespace dtrain::launch {

struct Job {
  Job(const LaunchOptions& options, SignalForwarding& signals, Diagnostics& diagnostics)
      : options(options), signals(signals), diagnostics(diagnostics) {}

  const LaunchOptions& options;
  SignalForwarding& signals;
  Diagnostics& diagnostics;
  std::string log_dir;
  // One per rank whose output this node carries: logs[0] is first_rank's.
  std::vector<std::unique_ptr<RankLog>> logs;
  int first_rank = 0;
  std::unique_ptr<NodeStore> store;  // none under mpirun, which brings its own rendezvous
  int threads = 1;                   // intra-op threads per worker, see Note [Launchers that share a host]
  pid_t launcher_pid = -1;

  RankLog& log_of(int rank) const { return *logs[static_cast<size_t>(rank - first_rank)]; }
};

struct AttemptOutcome {
  bool succeeded = false;
  int exit_code = 0;
  std::optional<int> failed_rank;
  std::string failure;
  std::optional<int> signal;  // the launcher was asked to stop
  bool retryable = true;      // false when the command cannot be run at all
};

}  // namespace dtrain::launch
