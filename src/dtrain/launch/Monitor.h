// The poll loop of one attempt: the workers' output, their exits, signals to the launcher, and
// other nodes' failures, until every worker is reaped and its pipes are drained. The first
// failure stops the others (SIGTERM, then SIGKILL after the grace period) and is what the
// attempt reports.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "dtrain/launch/Job.h"
#include "dtrain/launch/MpiOutputDemux.h"
#include "dtrain/launch/Spawn.h"
#include "dtrain/launch/WorkerOutput.h"
#include "dtrain/util/Clock.h"

namespace dtrain::launch {

class Monitor {
 public:
  // demux: mpirun's, whose account of the failed rank comes through its output; else nullptr.
  Monitor(Job& job, int attempt, std::vector<Worker>& workers, WorkerOutput& output,
          const MpiOutputDemux* demux, AttemptOutcome& outcome)
      : job_(job), attempt_(attempt), workers_(workers), output_(output), demux_(demux), outcome_(outcome) {}

  // Until every worker is reaped. already_stopping: the workers were told to stop before (one of
  // them could not be started, and outcome says why).
  void run(bool already_stopping);

  // An elastic job's replacement of a failed worker (its wait status given): the new worker, or
  // none when this node may not replace it any more, which fails the attempt as without it. Set,
  // it also keeps this node from telling other nodes of its failures or stopping for theirs.
  using Respawn = std::function<std::optional<Worker>(const Worker& failed, int status)>;
  void set_respawn(Respawn respawn) { respawn_ = std::move(respawn); }

 private:
  bool all_exited() const;
  bool poll_output();
  void handle_signal();
  void notice_exits();
  void on_failure(Worker& worker, int status);
  void check_other_nodes();
  void stop(int signo);
  void kill_after_grace();
  void drain_once_all_exited();
  void finish();

  Job& job_;
  int attempt_;
  std::vector<Worker>& workers_;
  WorkerOutput& output_;
  const MpiOutputDemux* demux_;
  AttemptOutcome& outcome_;

  bool stopping_ = false;
  bool killed_ = false;
  bool failed_ = false;
  util::Clock::time_point kill_at_;
  util::Clock::time_point next_store_check_;
  std::optional<util::Clock::time_point> drain_until_;
  const Worker* mpirun_failure_ = nullptr;
  Respawn respawn_;
};

}  // namespace dtrain::launch
