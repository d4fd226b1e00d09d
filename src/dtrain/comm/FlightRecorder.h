// FlightRecorder: the last operations a communicator issued, with their start and end times, kept
// by every rank always (a ring of fixed records, no allocation per call), so that a timeout can
// say which collective each rank completed last and which one it waits in. And the fingerprint
// of a collective, which parallel.debug: detail compares between ranks before every collective.
#pragma once

#include <c10/core/ScalarType.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/comm/ReduceOp.h"
#include "dtrain/util/Clock.h"

namespace dtrain::comm {

// What every rank must agree on for a collective to match: the operation, the element type, the
// elements of this rank's input, the root (broadcast), the reduction and the collective's number
// on this communicator. Send and recv are not collectives: they carry the peer and no number.
struct CallFingerprint {
  const char* op = "";                                 // a row's name in kCollectives: "allreduce", ...
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // Undefined: barrier and split
  std::int64_t numel = 0;
  int root = -1;          // broadcast's root; send/recv's peer; -1 otherwise
  int reduce = -1;        // static_cast<int>(ReduceOp) for reductions; -1 otherwise
  std::int64_t seq = -1;  // collective number on this communicator, from 1; -1 for send/recv
  bool operator==(const CallFingerprint& other) const;
  bool operator!=(const CallFingerprint& other) const { return !(*this == other); }
};

// "allreduce(float32, 1000, sum, #17)", "broadcast(float32, 10, root 0, #18)", "barrier(#19)",
// "send(float32, 10, to 1)".
std::string describe(const CallFingerprint& call);

// A fixed-size record of a fingerprint for the exchange of parallel.debug: detail (int64 words);
// op names are sent as their row's CommOp (Collectives.h).
inline constexpr int kFingerprintWords = 7;
std::array<std::int64_t, kFingerprintWords> encode(const CallFingerprint& call);
CallFingerprint decode(const std::int64_t* words);

class FlightRecorder {
 public:
  static constexpr std::size_t kCapacity = 64;

  // Records an operation as started now; returns its ticket for finish(). Called by one thread at
  // a time, the one issuing the communicator's operations (Communicator.h).
  std::size_t start(const CallFingerprint& call);
  // Marks the operation of `ticket` finished now (successfully or not). An operation that 64
  // later ones pushed out of the ring before it finished is not marked.
  void finish(std::size_t ticket, bool ok);

  // The most recent operation that finished successfully, and the oldest that is still running.
  std::optional<CallFingerprint> last_completed() const;
  std::optional<CallFingerprint> oldest_pending() const;
  // One line for a report: "last completed allreduce(float32, 1000, sum, #16) 0.2 s ago; waiting
  // 2.0 s in allreduce(float32, 1000, sum, #17)".
  std::string summary() const;

 private:
  enum class State : std::uint8_t { Empty, Running, Done, Failed };  // two bits in Slot::outcome
  // A reader's copy of one record. Times are the coarse clock's (util::coarse_now()): read twice
  // per call, they are a report's tenths of a second, where a steady_clock read (~20 ns) is a
  // tenth of a small call's overhead (Note [The cost of a small call] in Communicator.cpp).
  struct Entry {
    CallFingerprint call;
    util::Clock::time_point started{};
    util::Clock::time_point ended{};
    State state = State::Empty;
    std::uint64_t id = 0;  // start() count when recorded, to tell a reused slot
  };
  // One record as its writers and readers share it, without a lock: see Note [A recorder
  // without a lock] in FlightRecorder.cpp. start() alone writes the fields under `version`;
  // finish() writes only `ended` and `outcome`.
  struct Slot {
    std::atomic<std::uint32_t> version{0};  // odd while start() is in it
    std::atomic<const char*> op{""};
    std::atomic<std::int64_t> numel{0};
    std::atomic<std::int64_t> seq{-1};
    std::atomic<std::uint64_t> packed{0};  // dtype, reduction, state when started, root
    std::atomic<std::int64_t> started{0};  // ns on the coarse clock
    std::atomic<std::uint64_t> id{~std::uint64_t{0}};
    std::atomic<std::int64_t> ended{0};
    std::atomic<std::uint64_t> outcome{0};  // (id + 1) << 2 | State of the operation that finished
  };
  static void write(Slot& slot, const Entry& entry);
  static void write_outcome(Slot& slot, std::uint64_t id, util::Clock::time_point ended, State state);
  // False when writers kept the slot busy through every attempt (a report then skips it).
  static bool read(const Slot& slot, Entry& out);
  bool read_last_done(Entry& out) const;
  std::optional<Entry> oldest_running() const;

  std::array<Slot, kCapacity> ring_{};
  std::atomic<std::uint64_t> started_{0};  // written by start() only
  // A hint: 1 + the id of the newest operation known to have finished successfully.
  std::atomic<std::uint64_t> newest_done_{0};
  // The newest finished operation whose ring slot a later one took, so that a long asynchronous
  // burst of running operations cannot push the last completed one out.
  Slot kept_;
};

}  // namespace dtrain::comm
