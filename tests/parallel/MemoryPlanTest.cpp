// The memory a run plans before it starts (train/MemoryPlan.h): what the host has is read, and a
// plan whose ranks would not fit is refused in one line naming the strategy and the figures.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "dtrain/parallel/MemoryPlan.h"

namespace dtrain::parallel {
namespace {

MemoryPlan plan_of(std::uint64_t parameters, int ranks, std::uint64_t available) {
  MemoryPlan plan;
  plan.state.parameters = parameters;
  plan.state.gradients = parameters;
  plan.state.optimizer_state = 2 * parameters;
  plan.before_model = 200'000'000;
  plan.available = available;
  plan.ranks_on_host = ranks;
  return plan;
}

TEST(MemoryPlan, ReadsThisProcessAndTheHost) {
  const auto host = read_host_memory();
  EXPECT_GT(host.resident, 1u << 20);
  EXPECT_GT(host.available, 1u << 20);
}

TEST(MemoryPlan, PeakIsThePlannedStateOnWhatTheProcessHeld) {
  const auto plan = plan_of(1'600'000'000, 8, 20'000'000'000);
  EXPECT_EQ(plan.peak(), 200'000'000u + 6'400'000'000u);
  EXPECT_EQ(plan.describe(3),
            "memory: rank 3 plans 6.40 GB of model state (parameters 1.60 GB, gradients 1.60 GB, optimizer "
            "state 3.20 GB), 6.60 GB at peak with the 200 MB the process held before the model; 8 rank(s) on "
            "this host, 20.00 GB available");
}

TEST(MemoryPlan, ASteppedGradientIsSaidApartFromWhatIsHeldBetweenSteps) {
  auto plan = plan_of(1'600'000'000, 8, 20'000'000'000);
  plan.state.gradients += 400'000'000;
  plan.state.step_gradients = 400'000'000;
  EXPECT_EQ(plan.state.held(), 6'400'000'000u);
  EXPECT_EQ(plan.describe(0),
            "memory: rank 0 plans 6.80 GB of model state, 6.40 GB of it held between steps (parameters 1.60 "
            "GB, gradients 2.00 GB of which 400 MB only while a step runs, optimizer state 3.20 GB), 7.00 GB "
            "at peak with the 200 MB the process held before the model; 8 rank(s) on this host, 20.00 GB "
            "available");
}

TEST(MemoryPlan, RanksThatDoNotFitAreRefusedInOneLine) {
  // 8 ranks of 6.4 GB need 51.2 GB; 4 ranks of 1 GB fit in 20 GB.
  EXPECT_NO_THROW(check_fits(plan_of(250'000'000, 4, 20'000'000'000), "pipeline"));
  try {
    check_fits(plan_of(1'600'000'000, 8, 20'000'000'000), "data_parallel");
    FAIL() << "8 ranks of 6.4 GB fitted in 20 GB";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("memory: parallel.strategy data_parallel holds 6.40 GB of model state a rank"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("the 8 rank(s) on this host need 51.20 GB where 20.00 GB is available"),
              std::string::npos)
        << message;
  }
  // Nothing planned, or nothing known of the host: nothing to check.
  EXPECT_NO_THROW(check_fits(plan_of(0, 8, 1), "decentralized"));
  EXPECT_NO_THROW(check_fits(plan_of(1'600'000'000, 8, 0), "data_parallel"));
}

}  // namespace
}  // namespace dtrain::parallel
