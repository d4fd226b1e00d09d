// The one clock dtrain measures durations with (monotonic), and seconds between two of its points.
#pragma once

#include <time.h>

#include <chrono>

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

}  // namespace dtrain::util
