#include "dtrain/comm/CommStats.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace dtrain::comm {

OpStats& OpStats::operator+=(const OpStats& other) {
  calls += other.calls;
  bytes += other.bytes;
  wire_bytes += other.wire_bytes;
  wait_seconds += other.wait_seconds;
  return *this;
}

OpStats CommStats::total() const {
  OpStats sum;
  for (const auto& [name, op] : ops) sum += op;
  return sum;
}

CommStats& CommStats::operator+=(const CommStats& other) {
  for (const auto& [name, op] : other.ops) ops[name] += op;
  return *this;
}

CommStats difference(const CommStats& later, const CommStats& earlier) {
  CommStats out;
  for (const auto& [name, op] : later.ops) {
    OpStats d = op;
    const auto it = earlier.ops.find(name);
    if (it != earlier.ops.end()) {
      d.calls -= it->second.calls;
      d.bytes -= it->second.bytes;
      d.wire_bytes -= it->second.wire_bytes;
      d.wait_seconds -= it->second.wait_seconds;
    }
    if (d.calls > 0 || d.wait_seconds > 0) out.ops[name] = d;
  }
  return out;
}

namespace {

// Only the issuing thread writes these: a load and a store, no locked instruction.
template <typename T>
void bump(std::atomic<T>& counter, T by) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

CommStatsRecorder::Slot* CommStatsRecorder::find(const char* op) {
  const std::size_t used = used_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    if (slots_[i].name.load(std::memory_order_relaxed) == op) return &slots_[i];
  }
  // The same name from another literal (another translation unit) shares the slot.
  for (std::size_t i = 0; i < used; ++i) {
    if (std::strcmp(slots_[i].name.load(std::memory_order_relaxed), op) == 0) return &slots_[i];
  }
  return nullptr;
}

CommStatsRecorder::Slot& CommStatsRecorder::slot(const char* op) {
  if (Slot* found = find(op)) return *found;
  std::lock_guard<std::mutex> lock(mutex_);
  if (Slot* found = find(op)) return *found;
  const std::size_t used = used_.load(std::memory_order_relaxed);
  if (used == kSlots) throw std::logic_error(std::string("CommStatsRecorder: no slot left for ") + op);
  slots_[used].name.store(op, std::memory_order_relaxed);
  used_.store(used + 1, std::memory_order_release);
  return slots_[used];
}

void CommStatsRecorder::add_call(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes) {
  Slot& s = slot(op);
  bump<std::uint64_t>(s.calls, 1);
  bump(s.bytes, bytes);
  bump(s.wire_bytes, wire_bytes);
}

void CommStatsRecorder::add(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes, double seconds) {
  Slot& s = slot(op);
  bump<std::uint64_t>(s.calls, 1);
  bump(s.bytes, bytes);
  bump(s.wire_bytes, wire_bytes);
  bump(s.issuer_wait, seconds);
}

void CommStatsRecorder::add_wait(const char* op, double seconds) {
  Slot& s = slot(op);
  std::lock_guard<std::mutex> lock(mutex_);
  s.any_wait += seconds;
}

CommStats CommStatsRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CommStats stats;
  const std::size_t used = used_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < used; ++i) {
    const Slot& s = slots_[i];
    OpStats op;
    op.calls = s.calls.load(std::memory_order_relaxed);
    op.bytes = s.bytes.load(std::memory_order_relaxed);
    op.wire_bytes = s.wire_bytes.load(std::memory_order_relaxed);
    op.wait_seconds = s.issuer_wait.load(std::memory_order_relaxed) + s.any_wait;
    if (op.calls == 0 && op.wait_seconds == 0.0) continue;  // nothing since reset()
    stats.ops[s.name.load(std::memory_order_relaxed)] += op;
  }
  return stats;
}

void CommStatsRecorder::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& s : slots_) {
    s.calls.store(0, std::memory_order_relaxed);
    s.bytes.store(0, std::memory_order_relaxed);
    s.wire_bytes.store(0, std::memory_order_relaxed);
    s.issuer_wait.store(0.0, std::memory_order_relaxed);
    s.any_wait = 0.0;
  }
}

}  // namespace dtrain::comm
