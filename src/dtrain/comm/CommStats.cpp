#include "dtrain/comm/CommStats.h"

#include <cstring>

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

OpStats& CommStatsRecorder::slot_locked(const char* op) {
  for (auto& [name, stats] : slots_) {
    if (name == op) return stats;
  }
  // The same name from another literal (another translation unit) shares the slot.
  for (auto& [name, stats] : slots_) {
    if (std::strcmp(name, op) == 0) return stats;
  }
  slots_.emplace_back(op, OpStats{});
  return slots_.back().second;
}

void CommStatsRecorder::add_call(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& s = slot_locked(op);
  s.calls += 1;
  s.bytes += bytes;
  s.wire_bytes += wire_bytes;
}

void CommStatsRecorder::add_wait(const char* op, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  slot_locked(op).wait_seconds += seconds;
}

void CommStatsRecorder::add(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& s = slot_locked(op);
  s.calls += 1;
  s.bytes += bytes;
  s.wire_bytes += wire_bytes;
  s.wait_seconds += seconds;
}

CommStats CommStatsRecorder::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CommStats stats;
  for (const auto& [name, op] : slots_) stats.ops[name] += op;
  return stats;
}

void CommStatsRecorder::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
}

}  // namespace dtrain::comm
