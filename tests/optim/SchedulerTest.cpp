// The schedules' values at chosen positions equal their closed forms.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/optim/Scheduler.h"

namespace dtrain::optim {
namespace {

config::SchedulerConfig schedule(const std::string& name) {
  config::SchedulerConfig config;
  config.name = name;
  return config;
}

TEST(SchedulerTest, ConstantIgnoresPosition) {
  Scheduler s(schedule("constant"), 0.01);
  EXPECT_DOUBLE_EQ(s.lr(0, 0, 0), 0.01);
  EXPECT_DOUBLE_EQ(s.lr(12345, 99, 0), 0.01);
}

TEST(SchedulerTest, StepDecaysTenfoldEveryThirtyEpochs) {
  Scheduler s(schedule("step"), 0.1);  // the DDP and Apex tutorial's default: x0.1 every 30 epochs
  EXPECT_DOUBLE_EQ(s.lr(0, 0, 0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(5000, 29, 0), 0.1);
  EXPECT_NEAR(s.lr(5001, 30, 0), 0.01, 1e-15);
  EXPECT_NEAR(s.lr(9000, 59, 0), 0.01, 1e-15);
  EXPECT_NEAR(s.lr(9001, 60, 0), 0.001, 1e-15);
  EXPECT_NEAR(s.lr(20000, 90, 0), 1e-4, 1e-16);
}

TEST(SchedulerTest, CosineEndpointsAndMidpoint) {
  auto config = schedule("cosine");
  config.final_lr = 0.001;
  Scheduler s(config, 0.1);
  const std::int64_t total = 101;  // steps 0..100; progress t = step / 100
  EXPECT_DOUBLE_EQ(s.lr(0, 0, total), 0.1);
  EXPECT_NEAR(s.lr(100, 0, total), 0.001, 1e-15);
  EXPECT_NEAR(s.lr(50, 0, total), 0.001 + (0.1 - 0.001) * 0.5, 1e-15);
  EXPECT_NEAR(s.lr(25, 0, total), 0.001 + (0.1 - 0.001) * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-15);
  EXPECT_NEAR(s.lr(500, 4, total), 0.001, 1e-15);  // past the end: stays at the final rate
}

TEST(SchedulerTest, WarmupIsLinearThenTheScheduleStarts) {
  auto config = schedule("cosine");
  config.warmup_steps = 10;
  config.final_lr = 0.0;
  Scheduler s(config, 0.5);
  for (int step = 0; step < 10; ++step) EXPECT_NEAR(s.lr(step, 0, 111), 0.5 * (step + 1) / 10.0, 1e-15);
  // Equal increments: linear.
  EXPECT_NEAR(s.lr(7, 0, 111) - s.lr(6, 0, 111), s.lr(3, 0, 111) - s.lr(2, 0, 111), 1e-15);
  EXPECT_DOUBLE_EQ(s.lr(10, 0, 111), 0.5);
  EXPECT_NEAR(s.lr(110, 0, 111), 0.0, 1e-15);
  EXPECT_NEAR(s.lr(60, 0, 111), 0.25, 1e-15);

  auto constant = schedule("constant");
  constant.warmup_steps = 4;
  Scheduler warm(constant, 1.0);
  EXPECT_DOUBLE_EQ(warm.lr(0, 0, 0), 0.25);
  EXPECT_DOUBLE_EQ(warm.lr(3, 0, 0), 1.0);
  EXPECT_DOUBLE_EQ(warm.lr(4, 0, 0), 1.0);
}

TEST(SchedulerTest, LinearAndLogDecayBetweenTwoRates) {
  auto linear = schedule("linear");
  linear.final_lr = 0.0005;
  Scheduler lin(linear, 0.005);
  EXPECT_DOUBLE_EQ(lin.lr(0, 0, 11), 0.005);
  EXPECT_NEAR(lin.lr(10, 0, 11), 0.0005, 1e-15);
  EXPECT_NEAR(lin.lr(5, 0, 11), (0.005 + 0.0005) / 2, 1e-15);

  auto log = schedule("log");
  log.final_lr = 0.0005;
  Scheduler geometric(log, 0.005);  // DiNNO: 0.005 -> 0.0005 on a log scale
  EXPECT_NEAR(geometric.lr(0, 0, 11), 0.005, 1e-15);
  EXPECT_NEAR(geometric.lr(10, 0, 11), 0.0005, 1e-15);
  EXPECT_NEAR(geometric.lr(5, 0, 11), std::sqrt(0.005 * 0.0005), 1e-15);  // geometric midpoint
  // Constant ratio between consecutive steps.
  EXPECT_NEAR(geometric.lr(3, 0, 11) / geometric.lr(2, 0, 11),
              geometric.lr(8, 0, 11) / geometric.lr(7, 0, 11), 1e-12);
}

TEST(SchedulerTest, ResumeGivesTheSameRates) {
  auto config = schedule("cosine");
  config.warmup_steps = 3;
  Scheduler first(config, 0.1);
  Scheduler resumed(config, 0.1);  // a new object after a restart
  for (std::int64_t step : {0, 2, 3, 17, 42, 99})
    EXPECT_EQ(first.lr(step, step / 10, 100), resumed.lr(step, step / 10, 100));
}

TEST(SchedulerTest, ApplySetsEveryParamGroup) {
  auto x = torch::zeros({2}, torch::requires_grad());
  config::OptimConfig optim;
  optim.lr = 0.1;
  auto optimizer = create_optimizer({x}, optim);
  Scheduler s(schedule("step"), optim.lr);
  EXPECT_NEAR(s.apply(*optimizer, 100, 31, 0), 0.01, 1e-15);
  EXPECT_NEAR(learning_rate(*optimizer), 0.01, 1e-15);
}

TEST(SchedulerTest, UnknownNamesAndImpossibleValuesThrow) {
  try {
    Scheduler s(schedule("exponential"), 0.1);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const auto& known : config::registered_choices(config::kScheduleKey).names())
      EXPECT_NE(message.find(known), std::string::npos) << known;
  }
  EXPECT_THROW(Scheduler(schedule("log"), 0.1), std::invalid_argument);  // final_lr 0 has no log
  auto step = schedule("step");
  step.step_size = 0;
  EXPECT_THROW(Scheduler(step, 0.1), std::invalid_argument);
  Scheduler cosine(schedule("cosine"), 0.1);
  EXPECT_THROW(cosine.lr(3, 0, 0), std::invalid_argument);  // needs the total number of steps
}

}  // namespace
}  // namespace dtrain::optim
