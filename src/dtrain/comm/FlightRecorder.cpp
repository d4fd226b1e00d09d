// The flight recorder's ring and the fingerprints' text and wire form; see FlightRecorder.h.
#include "dtrain/comm/FlightRecorder.h"

#include <fmt/format.h>

#include <cstring>

#include "dtrain/comm/Collectives.h"

namespace dtrain::comm {
namespace {

// A fingerprint's operation as its wire form sends it: its row in kCollectives, and past the last
// row for a name no row has ("?").
std::int64_t op_index(const char* op) {
  const CollectiveInfo* row = find_collective(op);
  return static_cast<std::int64_t>(row ? static_cast<std::size_t>(row->op) : kCollectives.size());
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Byte:
      return "uint8";
    default:
      return c10::toString(t);
  }
}

}  // namespace

bool CallFingerprint::operator==(const CallFingerprint& o) const {
  return op_index(op) == op_index(o.op) && dtype == o.dtype && numel == o.numel && root == o.root &&
         reduce == o.reduce && seq == o.seq;
}

std::string describe(const CallFingerprint& c) {
  std::string args;
  auto add = [&](const std::string& part) { args += args.empty() ? part : ", " + part; };
  if (c.dtype != c10::ScalarType::Undefined) {
    add(dtype_name(c.dtype));
    add(std::to_string(c.numel));
  }
  if (c.reduce >= 0) add(to_string(static_cast<ReduceOp>(c.reduce)));
  const CollectiveInfo* row = find_collective(c.op);
  if (c.root >= 0) add(fmt::format("{} {}", row && row->peer_label ? row->peer_label : "root", c.root));
  if (c.seq >= 0) add(fmt::format("#{}", c.seq));
  return fmt::format("{}({})", c.op, args);
}

std::array<std::int64_t, kFingerprintWords> encode(const CallFingerprint& c) {
  return {op_index(c.op), static_cast<std::int64_t>(c.dtype), c.numel, c.root, c.reduce, c.seq,
          // A check word: a rank whose record is garbage (a peer in another collective of the same
          // size would have been caught by the fingerprint already) is told from a real call.
          0x64747261696eLL};
}

CallFingerprint decode(const std::int64_t* w) {
  CallFingerprint c;
  const bool known = w[0] >= 0 && w[0] < static_cast<std::int64_t>(kCollectives.size());
  c.op = known ? kCollectives[static_cast<std::size_t>(w[0])].name : "?";
  c.dtype = static_cast<c10::ScalarType>(w[1]);
  c.numel = w[2];
  c.root = static_cast<int>(w[3]);
  c.reduce = static_cast<int>(w[4]);
  c.seq = w[5];
  return c;
}

// Note [A recorder without a lock]
// Every call writes the recorder twice (start, finish), and at 4 KB the two mutex round trips and
// the copy of the newest finished record that finish() made each time were 0.06-0.1x of a
// blocking MPI call; a locked instruction (a mutex, a fetch_add, a compare-and-swap) right after
// MPI's own stores costs several times what it costs in a loop (perf on a 2-vCPU VM: 80% of
// start()'s samples on one `lock xadd`). So writing the recorder takes no lock and no locked
// instruction:
// - start() is called by the thread that issues the communicator's operations, one at a time
//   (Communicator.h), so it counts ids with a plain load and store, and it alone writes a slot's
//   record and kept_;
// - each record is a sequence lock with that one writer: start() makes the version odd, stores the
//   fields (relaxed atomics) and makes it even again with a release store; a reader copies the
//   fields between two reads of the version and tries again when they differ or are odd (Boehm,
//   "Can seqlocks get along with programming language memory models?", MSPC 2012, the fence-based
//   reader; Linux's seqcount_t is the same protocol);
// - finish(), on whichever thread waits, stays out of the sequence lock: when its slot still holds
//   its id it stores the end time and then, with a release store, the slot's outcome word, which
//   names the id with the state. A reader takes a record as finished only when the outcome names
//   the record's id, so an outcome left by an operation the slot held before means nothing;
// - finish() also raises newest_done_, a hint: the newest finished id it knows of;
// - the newest finished operation is found by the reader (rare: a failure report), as the newest
//   Done record of the ring and kept_. Before start() reuses a slot whose operation finished, it
//   copies that record to kept_ unless the hint names a newer finished operation (which is then
//   still in the ring, or copied in its turn): in steady use, no copy at all.
// finish() must stay out of the sequence lock: when 64 starts overtake an operation still
// finishing, start() and a finish() writing under the lock would be two writers in one slot, their
// loads and stores of the version could interleave, and the version could stay odd for good: no
// reader could read that slot again, and a report would name an older operation as the last
// completed one (the stress test in CollectiveCheckTest.cpp catches that).
// What is left of that race: a finish overtaken, between its check of the slot and its stores, by
// 64 starts and the finish of the slot's new operation makes that operation look running, with the
// old one's end time. That is a report's line, never data, and it needs 64 operations to start
// while one thread is between two instructions.
namespace {

constexpr int kReadAttempts = 1000;

std::uint64_t pack(const CallFingerprint& c, std::uint8_t state) {
  return static_cast<std::uint64_t>(static_cast<std::uint8_t>(c.dtype)) |
         static_cast<std::uint64_t>(static_cast<std::uint8_t>(c.reduce + 1)) << 8 |
         static_cast<std::uint64_t>(state) << 16 |
         static_cast<std::uint64_t>(static_cast<std::uint32_t>(c.root)) << 32;
}

// The outcome word of operation `id` finished in `state` (Done or Failed: two bits).
std::uint64_t outcome_of(std::uint64_t id, std::uint8_t state) {
  return (id + 1) << 2 | state;
}

std::int64_t nanoseconds(util::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

util::Clock::time_point time_point(std::int64_t ns) {
  return util::Clock::time_point(
      std::chrono::duration_cast<util::Clock::duration>(std::chrono::nanoseconds(ns)));
}

}  // namespace

void FlightRecorder::write(Slot& slot, const Entry& e) {
  const auto v = slot.version.load(std::memory_order_relaxed);
  slot.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.op.store(e.call.op, std::memory_order_relaxed);
  slot.numel.store(e.call.numel, std::memory_order_relaxed);
  slot.seq.store(e.call.seq, std::memory_order_relaxed);
  slot.packed.store(pack(e.call, static_cast<std::uint8_t>(e.state)), std::memory_order_relaxed);
  slot.started.store(nanoseconds(e.started), std::memory_order_relaxed);
  // A finished record is copied to kept_, which start() alone writes: its end time goes with it.
  if (e.state == State::Done || e.state == State::Failed) {
    slot.ended.store(nanoseconds(e.ended), std::memory_order_relaxed);
  }
  slot.id.store(e.id, std::memory_order_relaxed);
  slot.version.store(v + 2, std::memory_order_release);
}

void FlightRecorder::write_outcome(Slot& slot, std::uint64_t id, util::Clock::time_point ended, State state) {
  slot.ended.store(nanoseconds(ended), std::memory_order_relaxed);
  slot.outcome.store(outcome_of(id, static_cast<std::uint8_t>(state)), std::memory_order_release);
}

bool FlightRecorder::read(const Slot& slot, Entry& out) {
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    const auto before = slot.version.load(std::memory_order_acquire);
    Entry e;
    e.call.op = slot.op.load(std::memory_order_relaxed);
    e.call.numel = slot.numel.load(std::memory_order_relaxed);
    e.call.seq = slot.seq.load(std::memory_order_relaxed);
    const auto packed = slot.packed.load(std::memory_order_relaxed);
    e.started = time_point(slot.started.load(std::memory_order_relaxed));
    e.id = slot.id.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((before & 1) != 0 || slot.version.load(std::memory_order_relaxed) != before) continue;
    e.call.dtype = static_cast<c10::ScalarType>(static_cast<std::int8_t>(packed & 0xff));
    e.call.reduce = static_cast<int>((packed >> 8) & 0xff) - 1;
    e.state = static_cast<State>((packed >> 16) & 0xff);
    e.call.root = static_cast<std::int32_t>(static_cast<std::uint32_t>(packed >> 32));
    if (e.call.op == nullptr) e.call.op = "";
    // The outcome, when it is this record's: its release store follows the end time's.
    const auto outcome = slot.outcome.load(std::memory_order_acquire);
    if ((outcome >> 2) == e.id + 1) e.state = static_cast<State>(outcome & 3);
    if (e.state == State::Done || e.state == State::Failed) {
      e.ended = time_point(slot.ended.load(std::memory_order_relaxed));
    }
    out = e;
    return true;
  }
  return false;
}

std::size_t FlightRecorder::start(const CallFingerprint& call) {
  const std::uint64_t id = started_.load(std::memory_order_relaxed);
  started_.store(id + 1, std::memory_order_relaxed);
  Slot& slot = ring_[id % kCapacity];
  // The operation this slot held may be the newest finished one: keep it before it is overwritten.
  if (id >= kCapacity) {
    const auto held = slot.id.load(std::memory_order_relaxed);
    const bool done = slot.outcome.load(std::memory_order_relaxed) ==
                      outcome_of(held, static_cast<std::uint8_t>(State::Done));
    if (done && held + 1 >= newest_done_.load(std::memory_order_relaxed) &&
        (kept_.version.load(std::memory_order_relaxed) == 0 ||
         held > kept_.id.load(std::memory_order_relaxed))) {
      Entry previous;
      if (read(slot, previous) && previous.state == State::Done) write(kept_, previous);
    }
  }
  Entry e;
  e.call = call;
  e.started = util::coarse_now();
  e.state = State::Running;
  e.id = id;
  write(slot, e);
  return static_cast<std::size_t>(id);
}

void FlightRecorder::finish(std::size_t ticket, bool ok) {
  const auto id = static_cast<std::uint64_t>(ticket);
  Slot& slot = ring_[id % kCapacity];
  if (slot.id.load(std::memory_order_relaxed) != id) return;  // pushed out by 64 later operations
  write_outcome(slot, id, util::coarse_now(), ok ? State::Done : State::Failed);
  if (ok && newest_done_.load(std::memory_order_relaxed) < id + 1) {
    newest_done_.store(id + 1, std::memory_order_relaxed);
  }
}

bool FlightRecorder::read_last_done(Entry& out) const {
  bool found = false;
  Entry e;
  if (kept_.version.load(std::memory_order_acquire) != 0 && read(kept_, e) && e.state == State::Done) {
    out = e;
    found = true;
  }
  for (const auto& slot : ring_) {
    if (!read(slot, e) || e.state != State::Done) continue;
    if (!found || e.id > out.id) {
      out = e;
      found = true;
    }
  }
  return found;
}

std::optional<CallFingerprint> FlightRecorder::last_completed() const {
  Entry e;
  if (!read_last_done(e)) return std::nullopt;
  return e.call;
}

std::optional<FlightRecorder::Entry> FlightRecorder::oldest_running() const {
  std::optional<Entry> oldest;
  for (const auto& slot : ring_) {
    Entry e;
    if (!read(slot, e) || e.state != State::Running) continue;
    if (!oldest || e.id < oldest->id) oldest = e;
  }
  return oldest;
}

std::optional<CallFingerprint> FlightRecorder::oldest_pending() const {
  const auto oldest = oldest_running();
  if (!oldest) return std::nullopt;
  return oldest->call;
}

std::string FlightRecorder::summary() const {
  const auto now = util::coarse_now();
  Entry last;
  std::string out = read_last_done(last) ? fmt::format("last completed {} {:.1f} s ago", describe(last.call),
                                                       util::seconds_between(last.ended, now))
                                         : std::string("completed no operation yet");
  const auto oldest = oldest_running();
  if (oldest) {
    out += fmt::format("; waiting {:.1f} s in {}", util::seconds_between(oldest->started, now),
                       describe(oldest->call));
  }
  return out;
}

}  // namespace dtrain::comm
