// The one clock dtrain measures durations with (monotonic), and seconds between two of its points.
#pragma once

#include <chrono>

namespace dtrain::util {

using Clock = std::chrono::steady_clock;

inline double seconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

inline double seconds_since(Clock::time_point start) {
  return seconds_between(start, Clock::now());
}

}  // namespace dtrain::util
