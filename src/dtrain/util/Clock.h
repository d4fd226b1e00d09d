// The one clock dtrain measures durations with (monotonic), and seconds between two of its points.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace dtrain::util {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

inline double seconds_since(Clock::time_point start) {
  return seconds_between(start, Clock::now());
}

// Clock's time as the kernel's coarse copy (CLOCK_MONOTONIC_COARSE, the same epoch as
// steady_clock): a few ns to read instead of ~20, at the price of lagging by up to
// coarse_resolution() (a scheduler tick). For deadlines of a second or more checked on every
// communication call; never for durations.
inline Clock::time_point coarse_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                                       std::chrono::nanoseconds(ts.tv_nsec)));
}

// How far coarse_now() may lag Clock::now().
inline Clock::duration coarse_resolution() {
  static const Clock::duration resolution = [] {
    timespec ts{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
    return std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                       std::chrono::nanoseconds(ts.tv_nsec));
  }();
  return resolution;
}

// Note [Interval ticks]
// A blocking 4 KB collective between two ranks of one host takes 0.5 us, and timing it for
// CommStats with two steady_clock reads (~20 ns each on this project's VMs, more in the middle of
// a call) cost 0.09x of it on a 2-vCPU VM. IntervalClock times such short intervals with the
// processor's time-stamp counter (rdtsc, ~9 ns) where the kernel itself keeps time with it
// (clocksource "tsc": it found the counter invariant and synchronised across CPUs, and would have
// switched to another source otherwise), and with steady_clock everywhere else. Ticks become
// seconds by the counter's rate, measured once against steady_clock over at least 2 ms from the
// first tick read (the first conversion waits out what is left of those 2 ms, once per process):
// relative error about 1e-5. absl's CycleClock and folly's hardware timestamp do the same; we
// take the kernel's choice of clocksource as the test of a usable counter instead of CPUID's
// invariant-TSC bit, which says nothing of synchronisation between sockets. For durations of a
// call only: across a VM migration or a suspend the counter may jump, and a negative interval
// (a thread moved between CPUs whose counters differ by a few cycles) counts as zero.
class IntervalClock {
 public:
  using ticks = std::uint64_t;

  static ticks now() {
#if defined(__x86_64__)
    if (state().tsc) return __rdtsc();
#endif
    return steady_ticks();
  }

  static double seconds_between(ticks start, ticks end) {
    if (end <= start) return 0.0;
    return static_cast<double>(end - start) * seconds_per_tick();
  }

  static double seconds_since(ticks start) {
    return seconds_between(start, now());
  }

  // True when ticks are the time-stamp counter's.
  static bool counts_cycles() {
    return state().tsc;
  }

 private:
  struct State {
    bool tsc = false;
    ticks anchor_ticks = 0;
    Clock::time_point anchor_time{};
  };

  static ticks steady_ticks() {
    return static_cast<ticks>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
  }

  static bool kernel_keeps_time_with_tsc() {
#if defined(__x86_64__)
    std::FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f) return false;
    char name[32] = {};
    const bool read = std::fgets(name, sizeof name, f) != nullptr;
    std::fclose(f);
    return read && std::strcmp(name, "tsc\n") == 0;
#else
    return false;
#endif
  }

  static const State& state() {
    static const State s = [] {
      State out;
      out.tsc = kernel_keeps_time_with_tsc();
      out.anchor_time = Clock::now();
#if defined(__x86_64__)
      if (out.tsc) out.anchor_ticks = __rdtsc();
#endif
      return out;
    }();
    return s;
  }

  static double seconds_per_tick() {
    static const double rate = [] {
      const State& s = state();
      if (!s.tsc) return 1e-9;
#if defined(__x86_64__)
      Clock::time_point t = Clock::now();
      while (t - s.anchor_time < std::chrono::milliseconds(2)) t = Clock::now();
      const ticks end = __rdtsc();
      const double elapsed = std::chrono::duration<double>(t - s.anchor_time).count();
      return end > s.anchor_ticks ? elapsed / static_cast<double>(end - s.anchor_ticks) : 1e-9;
#else
      return 1e-9;
#endif
    }();
    return rate;
  }
};

}  // namespace dtrain::util
