// The flight recorder's ring and the fingerprints' text and wire form; see FlightRecorder.h.
#include "dtrain/comm/FlightRecorder.h"

#include <fmt/format.h>

#include <cstring>

namespace dtrain::comm {
namespace {

// The operations a fingerprint may name, in a fixed order: the wire form sends the index.
constexpr std::array<const char*, 10> kOps{"allreduce", "allgather", "broadcast", "reduce_scatter",
                                           "alltoall",  "barrier",   "split",     "send",
                                           "recv",      "?"};

std::int64_t op_index(const char* op) {
  for (std::size_t i = 0; i + 1 < kOps.size(); ++i) {
    if (std::strcmp(kOps[i], op) == 0) return static_cast<std::int64_t>(i);
  }
  return static_cast<std::int64_t>(kOps.size() - 1);
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
  const bool p2p = std::strcmp(c.op, "send") == 0 || std::strcmp(c.op, "recv") == 0;
  if (c.root >= 0) add(fmt::format("{} {}", p2p ? (c.op[0] == 's' ? "to" : "from") : "root", c.root));
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
  const auto index = w[0] >= 0 && w[0] < static_cast<std::int64_t>(kOps.size()) ? w[0] : kOps.size() - 1;
  c.op = kOps[static_cast<std::size_t>(index)];
  c.dtype = static_cast<c10::ScalarType>(w[1]);
  c.numel = w[2];
  c.root = static_cast<int>(w[3]);
  c.reduce = static_cast<int>(w[4]);
  c.seq = w[5];
  return c;
}

std::size_t FlightRecorder::start(const CallFingerprint& call) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t slot = started_ % kCapacity;
  auto& e = entries_[slot];
  e.call = call;
  e.started = util::coarse_now();
  e.state = Entry::State::Running;
  e.id = started_++;
  return slot;
}

void FlightRecorder::finish(std::size_t slot, bool ok) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& e = entries_[slot];
  e.ended = util::coarse_now();
  e.state = ok ? Entry::State::Done : Entry::State::Failed;
  if (ok && (!last_done_ || e.id > last_done_->id)) last_done_ = e;
}

std::optional<CallFingerprint> FlightRecorder::last_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!last_done_) return std::nullopt;
  return last_done_->call;
}

std::optional<CallFingerprint> FlightRecorder::oldest_pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry* oldest = nullptr;
  for (const auto& e : entries_) {
    if (e.state != Entry::State::Running) continue;
    if (!oldest || e.id < oldest->id) oldest = &e;
  }
  if (!oldest) return std::nullopt;
  return oldest->call;
}

std::string FlightRecorder::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = util::coarse_now();
  std::string out = last_done_ ? fmt::format("last completed {} {:.1f} s ago", describe(last_done_->call),
                                             util::seconds_between(last_done_->ended, now))
                               : std::string("completed no operation yet");
  const Entry* oldest = nullptr;
  for (const auto& e : entries_) {
    if (e.state != Entry::State::Running) continue;
    if (!oldest || e.id < oldest->id) oldest = &e;
  }
  if (oldest) {
    out += fmt::format("; waiting {:.1f} s in {}", util::seconds_between(oldest->started, now),
                       describe(oldest->call));
  }
  return out;
}

}  // namespace dtrain::comm
