// Note [Interval ticks]: IntervalClock's ticks turn into the seconds steady_clock measures for the
// same interval, and an interval that runs backwards counts as nothing.
#include "dtrain/util/Clock.h"

#include <gtest/gtest.h>

#include <chrono>

namespace dtrain::util {
namespace {

TEST(IntervalClock, MeasuresTheSecondsSteadyClockMeasures) {
  // Both clocks time the same 20 ms of busy waiting, so a preempted thread stretches both alike.
  for (int round = 0; round < 3; ++round) {
    const auto ticks0 = IntervalClock::now();
    const auto t0 = Clock::now();
    auto t1 = t0;
    while (t1 - t0 < std::chrono::milliseconds(20)) t1 = Clock::now();
    const auto ticks1 = IntervalClock::now();
    const double steady = seconds_between(t0, t1);
    const double interval = IntervalClock::seconds_between(ticks0, ticks1);
    EXPECT_NEAR(interval, steady, 0.01 * steady)
        << "round " << round << ", ticks are " << (IntervalClock::counts_cycles() ? "rdtsc" : "steady_clock");
  }
}

TEST(IntervalClock, AnIntervalThatRunsBackwardsIsZero) {
  const auto later = IntervalClock::now() + 1000;
  EXPECT_EQ(IntervalClock::seconds_between(later, later - 1000), 0.0);
  EXPECT_EQ(IntervalClock::seconds_between(later, later), 0.0);
  EXPECT_GT(IntervalClock::seconds_between(later - 1000, later), 0.0);
}

}  // namespace
}  // namespace dtrain::util
