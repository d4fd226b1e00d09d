// The watchdog over blocking MPI calls: a thread that wakes a few times per timeout and ends the
// process when the watched call has lasted longer than the timeout.
#include "dtrain/comm/mpi/MpiWatchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dtrain::comm::mpi {

using util::Clock;

// Note [Blocking collectives and the watchdog]
// A blocking all-reduce calls MPI_Allreduce itself, and a blocking allgather MPI_Allgather:
// OpenMPI's tuned collectives are several times faster at small sizes than anything polled from
// outside or libnbc's schedules (measured on a 2-vCPU VM: 4 KB all-reduce 1.4 us against 4.3 us
// polled), and a blocking reduce_scatter MPI_Reduce_scatter_block, whose four algorithms (basic
// linear, recursive doubling, recursive halving, butterfly, picked by world and block size)
// CommStats counts as Note [OpenMPI's algorithms] says. Every
// operation queued before such a call is posted first (drain_queued), so that every rank starts
// its collectives in the same order. Blocking and non-blocking collectives never match each other in MPI, so
// every rank takes this path for the same call. Such a call cannot be given up, so a watchdog thread checks
// it against the communicator's timeout and, when a peer never arrives, prints the error naming rank,
// operation and size and ends the process with exit code 1, upon which mpirun stops the job: PyTorch's NCCL
// watchdog does the same. Before the call, the caller waits until no stepped operation (our own polled
// all-reduce, advanced by the progress thread) is outstanding: the call holds the MPI lock, and a peer may be
// waiting for the next step of one of those before it reaches this collective.
Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::arm(const char* op, std::int64_t bytes) {
  std::call_once(started_, [this] { thread_ = std::thread([this] { run(); }); });
  op_.store(op, std::memory_order_relaxed);
  bytes_.store(bytes, std::memory_order_relaxed);
  // The coarse clock: read on every blocking call (Note [The cost of a small call] in
  // Communicator.cpp); run() allows for its lag, so a call is never ended before its timeout.
  armed_at_.store(util::coarse_now().time_since_epoch().count(), std::memory_order_release);
}

void Watchdog::run() {
  const auto period = std::clamp<std::chrono::milliseconds>(timeout_ / 8, std::chrono::milliseconds(10),
                                                            std::chrono::milliseconds(1000));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
    const auto at = armed_at_.load(std::memory_order_acquire);
    if (at == 0 ||
        Clock::now() - Clock::time_point(Clock::duration(at)) < timeout_ + util::coarse_resolution())
      continue;
    // The flight recorder's line (Note [Flight recorder]): mpirun gathers every rank's, so the
    // rank that stopped is the one whose line is missing or ends earlier.
    const std::string recorded = recorder_ ? "; flight recorder: this rank " + recorder_->summary() : "";
    std::fprintf(
        stderr,
        "[rank %d/%d] %s (%lld bytes, mpi): timed out after %g s; a peer may have died or not called "
        "this operation. A blocking MPI collective cannot be withdrawn, so this process exits with "
        "code 1 and mpirun stops the job%s\n",
        rank_, size_, op_.load(std::memory_order_relaxed),
        static_cast<long long>(bytes_.load(std::memory_order_relaxed)),
        std::chrono::duration<double>(timeout_).count(), recorded.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

}  // namespace dtrain::comm::mpi
