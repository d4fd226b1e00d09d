// CommStats: what communication cost, per operation: calls, payload bytes, bytes this rank put on
// the wire under the backend's algorithm, and seconds spent waiting for completion.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

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
  std::map<std::string, OpStats> ops;  // keyed by operation name: "allreduce", "broadcast", ...

  OpStats total() const;
  CommStats& operator+=(const CommStats& other);
};

// What happened between two snapshots of the same recorder (`earlier` taken first).
CommStats difference(const CommStats& later, const CommStats& earlier);

// Thread-safe accumulator behind Communicator::stats(); operations may complete on backend threads.
// `op` is the operation's name, a string literal (the Communicator's). Each name gets a slot the
// first time it is seen, found again by the literal's address: no string is built and no map
// searched per call, which at 4 KB showed in the latency (Note [The cost of a small call] in
// Communicator.cpp).
class CommStatsRecorder {
 public:
  void add_call(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes);
  void add_wait(const char* op, double seconds);
  // add_call and add_wait at once, for a blocking call.
  void add(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes, double seconds);
  CommStats snapshot() const;
  void reset();

 private:
  // With mutex_ held: op's slot.
  OpStats& slot_locked(const char* op);

  mutable std::mutex mutex_;
  std::vector<std::pair<const char*, OpStats>> slots_;
};

}  // namespace dtrain::comm
