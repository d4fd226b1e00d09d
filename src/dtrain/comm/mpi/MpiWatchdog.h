// The watchdog over the mpi backend's blocking MPI calls, which cannot time out by themselves: a
// call that outlives the communicator's timeout ends the process. Internal to comm/mpi.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "dtrain/comm/FlightRecorder.h"
#include "dtrain/util/Clock.h"

namespace dtrain::comm::mpi {

// See Note [Blocking collectives and the watchdog].
class Watchdog {
 public:
  // `recorder` (the communicator's) is quoted in the message when a call times out.
  Watchdog(int rank, int size, std::chrono::milliseconds timeout, const FlightRecorder* recorder)
      : rank_(rank), size_(size), timeout_(timeout), recorder_(recorder) {}
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches the blocking call that starts now; disarm() when it returns.
  void arm(const char* op, std::int64_t bytes);
  void disarm() { armed_at_.store(0, std::memory_order_release); }

 private:
  void run();

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const FlightRecorder* recorder_;
  std::atomic<util::Clock::rep> armed_at_{0};  // 0: nothing watched
  std::atomic<const char*> op_{""};
  std::atomic<std::int64_t> bytes_{0};
  std::once_flag started_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain::comm::mpi
