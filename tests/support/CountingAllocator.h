// CountingAllocator: LibTorch's CPU allocator wrapped so that a test can read how many bytes of
// tensor storage a thread holds, and the most it held at once, while a step runs. The counts are
// per thread (ranks run as threads in tests/support/ThreadWorld.h): each thread names its own
// Counter, and a storage's bytes are given back to the counter that allocated them whichever
// thread frees them. Threads without a counter (gloo's workers) are not counted.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dtrain::testing {

struct AllocationCounter {
  std::atomic<std::int64_t> live{0};  // bytes held now
  std::atomic<std::int64_t> peak{0};  // the most held at once since reset_peak()

  void add(std::int64_t bytes) {
    const auto now = live.fetch_add(bytes) + bytes;
    auto seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  void reset_peak() { peak.store(live.load()); }
};

class CountingAllocator final : public c10::Allocator {
 public:
  // The counter that allocations on this thread are charged to; null: not counted.
  static AllocationCounter*& counter_of_this_thread() {
    thread_local AllocationCounter* counter = nullptr;
    return counter;
  }

  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  // c10::Allocator's virtuals differ by version: allocate() is const in LibTorch 1.13, not in 2.x,
  // where copy_data() is pure virtual too. Both spellings are defined, none marked override, so
  // that each version's pure virtuals are met (the others are plain members).
  c10::DataPtr allocate(std::size_t n) { return static_cast<const CountingAllocator&>(*this).allocate(n); }
  c10::DataPtr allocate(std::size_t n) const {
    auto inner = base_->allocate(n);
    auto* counter = counter_of_this_thread();
    if (counter == nullptr) return inner;
    const auto device = inner.device();
    void* data = inner.get();
    counter->add(static_cast<std::int64_t>(n));
    auto* context = new Context{std::move(inner), counter, static_cast<std::int64_t>(n)};
    return {data, context, &Context::free, device};
  }
  c10::DeleterFnPtr raw_deleter() const { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }

 private:
  struct Context {
    c10::DataPtr inner;
    AllocationCounter* counter;
    std::int64_t bytes;
    static void free(void* context) {
      auto* self = static_cast<Context*>(context);
      self->counter->add(-self->bytes);
      delete self;  // frees the storage through the base allocator's own deleter
    }
  };
  c10::Allocator* base_;
};

// Installs a CountingAllocator as the CPU allocator for its lifetime. The allocator itself lives
// for the whole process: storages it handed out may outlive the guard.
class CountingAllocatorGuard {
 public:
  CountingAllocatorGuard() : previous_(c10::GetAllocator(c10::DeviceType::CPU)) {
    static CountingAllocator counting(previous_);
    c10::SetAllocator(c10::DeviceType::CPU, &counting);
  }
  ~CountingAllocatorGuard() { c10::SetAllocator(c10::DeviceType::CPU, previous_); }
  CountingAllocatorGuard(const CountingAllocatorGuard&) = delete;
  CountingAllocatorGuard& operator=(const CountingAllocatorGuard&) = delete;

 private:
  c10::Allocator* previous_;
};

}  // namespace dtrain::testing
