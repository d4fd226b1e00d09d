// CommStats: what communication cost, per operation: calls, payload bytes, bytes this rank put on
// the wire under the backend's algorithm, and seconds spent waiting for completion.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "dtrain/comm/Collectives.h"

namespace dtrain::comm {

struct OpStats {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;  // payload: the size of the buffer handed to the operation
  // Sent by this rank under the algorithm its backend ran (Note [Wire bytes] in WireBytes.h).
  std::uint64_t wire_bytes = 0;
  double wait_seconds = 0.0;  // time callers spent blocked in Work::wait or a blocking call

  OpStats& operator+=(const OpStats& other);
};

struct CommStats {
  std::map<std::string, OpStats> ops;  // keyed by operation name (kCollectives): "allreduce", ...

  OpStats total() const;
  CommStats& operator+=(const CommStats& other);
};

// What happened between two snapshots of the same recorder (`earlier` taken first).
CommStats difference(const CommStats& later, const CommStats& earlier);

// The accumulator behind Communicator::stats(). `op` is the operation's name, a string literal
// (the Communicator's). Each name gets a slot the first time it is seen, found again by the
// literal's address: no string is built and no map searched per call (Note [The cost of a small
// call] in Communicator.cpp). What the thread issuing the communicator's operations records (one
// thread at a time: Communicator.h) takes no lock: only that thread writes those counters, with
// relaxed atomic loads and stores, and snapshot() may read them from any thread. A Work's waiting
// time may be recorded from any thread, under a mutex.
class CommStatsRecorder {
 public:
  // On the issuing thread.
  void add_call(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes);
  // add_call and its waiting at once, for a blocking call; on the issuing thread.
  void add(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes, double seconds);
  // On any thread.
  void add_wait(const char* op, double seconds);
  // On any thread; a call being recorded meanwhile may show in some of its counters only.
  CommStats snapshot() const;
  // On the issuing thread, with no Work being waited on.
  void reset();

 private:
  static constexpr std::size_t kSlots = 16;
  static_assert(kSlots >= kCollectives.size(), "a slot for each of the Communicator's operations");
  struct Slot {
    std::atomic<const char*> name{nullptr};
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> wire_bytes{0};
    std::atomic<double> issuer_wait{0.0};  // blocking calls: the issuing thread's
    double any_wait = 0.0;                 // Work::wait on any thread: under mutex_
  };
  Slot& slot(const char* op);
  Slot* find(const char* op);

  mutable std::mutex mutex_;  // any_wait, and claiming a slot
  std::array<Slot, kSlots> slots_{};
  std::atomic<std::size_t> used_{0};
};

}  // namespace dtrain::comm
