// train.precision through the Trainer: fp16's overflow is skipped, logged on rank 0's log in
// Apex's words and counted in the result; a resume continues with the saved loss scale; bf16 is
// reported as the run's precision.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/io/Logger.h"
#include "dtrain/train/RunCallbacks.h"
#include "dtrain/train/Trainer.h"
#include "support/ScratchDir.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

config::RunConfig small_config(const std::string& precision) {
  auto c = testing::small_trainer_config("precision-test");
  c.train.precision = config::kPrecisionNames.parse(precision, "train.precision");
  return c;
}

// After step `at`, the weights are blown up by 1e4 so that the next step's fp16 forward
// overflows; after that step (skipped, so the weights did not move) they are put back exactly.
struct InjectOverflow : Callback {
  explicit InjectOverflow(std::int64_t at) : at(at) {}
  void on_step_end(Trainer& t, const StepEvent& e) override {
    torch::NoGradGuard no_grad;
    if (e.step == at) {
      for (auto& [name, value] : t.strategy().model_state()) {
        saved.push_back(value.clone());
        value.mul_(1e4);  // model_state() shares the parameters' storage for this strategy
      }
    } else if (e.step == at + 1) {
      skipped_when_injected = e.skipped;
      std::size_t i = 0;
      for (auto& [name, value] : t.strategy().model_state()) value.copy_(saved[i++]);
    }
  }
  std::int64_t at;
  std::vector<torch::Tensor> saved;
  bool skipped_when_injected = false;
};

std::vector<std::string> lines_with(const std::filesystem::path& file, const std::string& text) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.find(text) != std::string::npos) out.push_back(line);
  }
  return out;
}

TEST(MixedPrecisionTrainer, Fp16OverflowIsSkippedLoggedAndCounted) {
  const dtrain::testing::ScratchDir dir;
  io::LoggerOptions options;
  options.file = dir / "log.txt";
  auto logger = std::make_shared<io::Logger>(options);
  Trainer trainer(small_config("fp16"), nullptr);
  auto inject = std::make_shared<InjectOverflow>(5);
  trainer.add_callback(inject);
  trainer.add_callback(std::make_shared<MetricsLog>(nullptr, logger, 0));
  const auto result = trainer.fit();
  EXPECT_TRUE(inject->skipped_when_injected);
  ASSERT_GE(result.skipped_steps, 1);
  EXPECT_EQ(result.loss_scale, 65536.0 * std::pow(0.5, static_cast<double>(result.skipped_steps)));
  // Without step logging the skips are reported once, at the end, with the final scale.
  const auto logged = lines_with(options.file, "gradient overflow: ");
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged.front().find(fmt::format("skipped {} of steps 1-{}, loss scale → {}", result.skipped_steps,
                                            result.steps, result.loss_scale)),
            std::string::npos)
      << logged.front();
  EXPECT_EQ(trainer.model_facts().precision, "fp16");
  EXPECT_LT(result.final_eval.loss, std::log(4.0));  // it learned despite the skip
}

// With step logging, the log line that ends the interval holding the skipped step reports it
// (read there with the loss, not at the step: Note [A loss scaler on the device]).
TEST(MixedPrecisionTrainer, SkippedStepsAreReportedWithTheirLogInterval) {
  const dtrain::testing::ScratchDir dir;
  io::LoggerOptions options;
  options.file = dir / "log.txt";
  auto logger = std::make_shared<io::Logger>(options);
  Trainer trainer(small_config("fp16"), nullptr);
  trainer.add_callback(std::make_shared<InjectOverflow>(5));
  trainer.add_callback(std::make_shared<MetricsLog>(nullptr, logger, 4));
  const auto result = trainer.fit();
  ASSERT_EQ(result.skipped_steps, 1);
  const auto logged = lines_with(options.file, "gradient overflow: ");
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged.front().find("skipped 1 of steps 5-8, loss scale → 32768"), std::string::npos)
      << logged.front();
}

TEST(MixedPrecisionTrainer, ResumeContinuesWithTheSavedScale) {
  auto config = small_config("fp16");
  config.train.epochs = 3;
  Trainer straight(config, nullptr);
  straight.add_callback(std::make_shared<InjectOverflow>(5));
  const auto straight_result = straight.fit();

  Trainer first(config, nullptr);
  first.add_callback(std::make_shared<InjectOverflow>(5));
  first.add_callback(std::make_shared<testing::StopAt>(21));
  first.fit();
  io::Checkpoint checkpoint;
  first.save_state(checkpoint);
  ASSERT_TRUE(checkpoint.contains("strategy/loss_scaler/scale"));

  Trainer resumed(config, nullptr);
  resumed.load_state(checkpoint);
  const auto resumed_result = resumed.fit();
  EXPECT_EQ(resumed_result.loss_scale, straight_result.loss_scale);
  EXPECT_LT(resumed_result.loss_scale, 65536.0);
  const auto a = resumed.strategy().model_state();
  const auto b = straight.strategy().model_state();
  for (const auto& [name, value] : b) EXPECT_TRUE(torch::equal(a.at(name), value)) << name;
}

TEST(MixedPrecisionTrainer, Bf16RunLearnsAndReportsItsPrecision) {
  Trainer trainer(small_config("bf16"), nullptr);
  const auto result = trainer.fit();
  EXPECT_EQ(trainer.model_facts().precision, "bf16");
  EXPECT_EQ(result.loss_scale, 0.0);
  EXPECT_LT(result.final_eval.loss, std::log(4.0));
}

}  // namespace
}  // namespace dtrain::train
