// One round: read the pipes that are ready, take a signal, notice exits, hear of other nodes'
// failures, escalate a stop that is taking too long, and once every worker has exited, drain.
// Workers stay zombies until the end, so a process group id is not reused while it may be signalled.
#include "dtrain/launch/Monitor.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "dtrain/launch/FailureReport.h"
#include "dtrain/launch/WorkerEnvironment.h"

namespace dtrain::launch {

using util::Clock;

void Monitor::run(bool already_stopping) {
  stopping_ = already_stopping;
  failed_ = !outcome_.failure.empty();
  kill_at_ = Clock::now() + job_.options.stop_grace;
  next_store_check_ = Clock::now();
  while (poll_output()) {
    handle_signal();
    notice_exits();
    check_other_nodes();
    kill_after_grace();
    drain_once_all_exited();
  }
  finish();
}

bool Monitor::all_exited() const {
  return std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.exited; });
}

// Waits a moment for output and reads what came; false once every worker has exited and its
// pipes are closed.
bool Monitor::poll_output() {
  std::vector<pollfd> fds;
  std::vector<std::pair<size_t, bool>> owners;  // (worker, is_stderr)
  for (size_t i = 0; i < workers_.size(); ++i) {
    for (const bool is_stderr : {false, true}) {
      const int fd = is_stderr ? workers_[i].err_fd : workers_[i].out_fd;
      if (fd < 0) continue;
      fds.push_back({fd, POLLIN, 0});
      owners.emplace_back(i, is_stderr);
    }
  }
  if (all_exited() && fds.empty()) return false;
  fds.push_back({job_.signals.fd(), POLLIN, 0});
  // Exits are noticed by polling waitid, so the wait is short.
  if (::poll(fds.data(), fds.size(), 50) > 0) {
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents != 0) output_.pump(workers_[owners[i].first], owners[i].second);
    }
  }
  return true;
}

void Monitor::handle_signal() {
  const int signo = job_.signals.take();
  if (signo == 0) return;
  if (outcome_.signal) {
    // A second signal: the user does not want to wait for the grace period.
    signal_workers(workers_, SIGKILL);
    killed_ = true;
    return;
  }
  outcome_.signal = signo;
  outcome_.exit_code = 128 + signo;
  outcome_.failure = fmt::format("dtrain launch: received {}, stopping all workers\n", signal_name(signo));
  job_.diagnostics.write(outcome_.failure);  // now, not after the grace period
  stop(signo);
}

void Monitor::notice_exits() {
  std::vector<Worker> replacements;
  for (auto& worker : workers_) {
    if (worker.exited) continue;
    const std::optional<int> status = exit_status(worker.pid);
    if (!status) continue;
    worker.exited = true;
    worker.status = *status;
    const bool ok = WIFEXITED(*status) && WEXITSTATUS(*status) == 0;
    if (ok || failed_ || stopping_) continue;
    if (respawn_) {
      output_.pump(worker, false);
      output_.pump(worker, true);
      if (auto replacement = respawn_(worker, *status)) {
        replacements.push_back(*replacement);
        continue;
      }
    }
    on_failure(worker, *status);
  }
  // After the loop: workers_ may move when it grows.
  workers_.insert(workers_.end(), replacements.begin(), replacements.end());
}

// The first worker to fail: it is what the attempt reports, and every other worker is stopped.
void Monitor::on_failure(Worker& worker, int status) {
  failed_ = true;
  // Read what the worker wrote before dying, so the tail quoted is complete.
  output_.pump(worker, false);
  output_.pump(worker, true);
  outcome_.exit_code = exit_code_of(status);
  if (demux_) {
    // mpirun's own account of which rank failed may still be in its pipes: reported in finish(),
    // once they are drained.
    mpirun_failure_ = &worker;
  } else {
    outcome_.failed_rank = worker.rank;
    outcome_.failure = rank_failure_report(worker.rank, worker.pid, status, job_.log_of(worker.rank),
                                           error_file(job_.log_dir, worker.rank));
  }
  if (job_.store && job_.store->shared() && !respawn_) {
    try {
      job_.store->announce_failure(attempt_, NodeFailure{worker.rank, outcome_.exit_code});
    } catch (const std::exception& e) {
      job_.diagnostics.write(
          fmt::format("dtrain launch: could not tell the other nodes about the failure: {}\n", e.what()));
    }
  }
  stop(SIGTERM);
}

void Monitor::check_other_nodes() {
  if (!job_.store || !job_.store->shared() || respawn_ || stopping_ || Clock::now() < next_store_check_)
    return;
  next_store_check_ = Clock::now() + std::chrono::milliseconds(200);
  const std::optional<NodeFailure> peer = job_.store->failure(attempt_);
  if (!peer) return;
  failed_ = true;
  outcome_.exit_code = peer->exit_code;
  outcome_.failed_rank = peer->rank;
  outcome_.failure = fmt::format(
      "dtrain launch: rank {} on another node failed with exit code {}; stopping this node's workers\n",
      peer->rank, peer->exit_code);
  stop(SIGTERM);
}

void Monitor::stop(int signo) {
  if (!stopping_) {
    stopping_ = true;
    kill_at_ = Clock::now() + job_.options.stop_grace;
  }
  signal_workers(workers_, signo);
}

void Monitor::kill_after_grace() {
  if (stopping_ && !killed_ && Clock::now() >= kill_at_) {
    signal_workers(workers_, SIGKILL);
    killed_ = true;
  }
}

void Monitor::drain_once_all_exited() {
  if (!all_exited()) return;
  // A worker's own children may still hold its pipes: they get a moment, then the group is killed.
  if (!drain_until_) drain_until_ = Clock::now() + std::chrono::seconds(1);
  if (Clock::now() < *drain_until_) return;
  signal_workers(workers_, SIGKILL);
  for (auto& worker : workers_) {
    output_.drain_and_close(worker, false);
    output_.drain_and_close(worker, true);
  }
}

void Monitor::finish() {
  if (mpirun_failure_) {
    outcome_.failed_rank = demux_->reported_failed_rank();
    const MpirunAccount account{outcome_.failed_rank, demux_->rank_nodes(), demux_->daemon_lost()};
    outcome_.failure = mpirun_failure_report(account, mpirun_failure_->pid, mpirun_failure_->status,
                                             job_.logs, job_.log_dir);
  }
  // No orphans: whatever a worker left behind in its group goes with it. Only then are the
  // zombies reaped, which frees their pids (and so their process group ids) for reuse.
  signal_workers(workers_, SIGKILL);
  reap(workers_);
  if (!failed_ && !outcome_.signal) {
    outcome_.succeeded = true;
    outcome_.exit_code = 0;
  }
}

}  // namespace dtrain::launch
