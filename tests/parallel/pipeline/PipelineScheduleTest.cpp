// The pipeline's schedules (GPipe, 1F1B) and their replay with measured pass times, and where the
// cuts between stages go: by parameters, by measured time, at given layers.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/pipeline/PipelineSchedule.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "dtrain/parallel/pipeline/StagePartition.h"
#include "parallel/ParallelTestUtil.h"
#include "parallel/pipeline/PipelineChecks.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel::pipeline {
namespace {

using Pass = PipelineAction::Pass;
using namespace checks;

// ---------------------------------------------------------------------------------------------
// Schedules

TEST(PipelineSchedule, EveryMicroBatchRunsForwardThenBackwardOnce) {
  for (const auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int stage = 0; stage < stages; ++stage) {
        for (int m = 1; m <= 9; ++m) {
          const auto actions = stage_schedule(kind, stages, stage, m);
          ASSERT_EQ(actions.size(), 2u * m);
          std::vector<int> forward_at(m, -1), backward_at(m, -1);
          for (std::size_t i = 0; i < actions.size(); ++i) {
            auto& slot = actions[i].pass == Pass::Forward ? forward_at : backward_at;
            ASSERT_EQ(slot[actions[i].micro_batch], -1);
            slot[actions[i].micro_batch] = static_cast<int>(i);
          }
          for (int i = 0; i < m; ++i) EXPECT_LT(forward_at[i], backward_at[i]);
        }
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostSMicroBatchesGPipeHoldsM) {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int stage = 0; stage < stages; ++stage) {
      for (int m = 1; m <= 12; ++m) {
        const int one_f_one_b =
            peak_held_micro_batches(stage_schedule(ScheduleKind::OneFOneB, stages, stage, m));
        EXPECT_LE(one_f_one_b, stages);
        EXPECT_EQ(one_f_one_b, std::min(stages - stage, m))
            << "S " << stages << " stage " << stage << " M " << m;
        EXPECT_EQ(peak_held_micro_batches(stage_schedule(ScheduleKind::GPipe, stages, stage, m)), m);
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBWarmsUpWithSMinusOneMinusSForwards) {
  // S = 4, stage 1, M = 5: two warm-up forwards, then F B pairs, then the cool-down.
  const std::vector<PipelineAction> expected{
      {Pass::Forward, 0},  {Pass::Forward, 1}, {Pass::Forward, 2},  {Pass::Backward, 0}, {Pass::Forward, 3},
      {Pass::Backward, 1}, {Pass::Forward, 4}, {Pass::Backward, 2}, {Pass::Backward, 3}, {Pass::Backward, 4}};
  EXPECT_EQ(stage_schedule(ScheduleKind::OneFOneB, 4, 1, 5), expected);
  EXPECT_DOUBLE_EQ(expected_idle_fraction(4, 8), 3.0 / 11.0);
  EXPECT_THROW(kScheduleNames.parse("interleaved", "pipeline schedule"), std::invalid_argument);
}

// Stage s's pass times, the same for every micro-batch.
std::vector<std::vector<double>> pass_times(const std::vector<double>& per_stage, int micro_batches) {
  std::vector<std::vector<double>> out;
  for (const double t : per_stage) out.emplace_back(micro_batches, t);
  return out;
}

TEST(PipelineReplay, EqualStagesTakeGPipesFormulaUnderBothSchedules) {
  for (const auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int m = 1; m <= 9; ++m) {
        const auto forward = pass_times(std::vector<double>(stages, 1.0), m);
        const auto backward = pass_times(std::vector<double>(stages, 2.0), m);
        const double span = replay_schedule(kind, forward, backward);
        EXPECT_DOUBLE_EQ(span, 3.0 * (m + stages - 1))
            << kScheduleNames.name(kind) << " S " << stages << " M " << m;
        // Each stage computes 3 M of it: idle (S-1)/(M+S-1).
        EXPECT_NEAR(1.0 - 3.0 * m / span, expected_idle_fraction(stages, m), 1e-12);
      }
    }
  }
}

TEST(PipelineReplay, AStageTwiceAsSlowSetsThePace) {
  // S = 2, M = 2, stage 0 passes 1 s, stage 1 2 s. GPipe: stage 0 forwards end at 1 and 2, stage 1's
  // at 3 and 5, its backwards at 7 and 9; stage 0's backwards wait for them: 7-8, 9-10. 1F1B
  // (stage 0: F0 F1 B0 B1; stage 1: F0 B0 F1 B1): stage 1 runs 1-3, 3-5, 5-7, 7-9, stage 0's
  // backwards 5-6 and 9-10.
  const auto forward = pass_times({1.0, 2.0}, 2);
  EXPECT_DOUBLE_EQ(replay_schedule(ScheduleKind::GPipe, forward, forward), 10.0);
  EXPECT_DOUBLE_EQ(replay_schedule(ScheduleKind::OneFOneB, forward, forward), 10.0);
  // One slow micro-batch on the first stage delays every later one on both stages under GPipe:
  // stage 0 forwards 0-1, 1-4 (slow), 4-5; stage 1 1-2, 4-5, 5-6; backwards 6-7, 7-8, 8-9 on stage
  // 1 and 7-8, 8-9, 9-10 on stage 0.
  auto uneven = pass_times({1.0, 1.0}, 3);
  uneven[0][1] = 3.0;
  EXPECT_DOUBLE_EQ(replay_schedule(ScheduleKind::GPipe, uneven, pass_times({1.0, 1.0}, 3)), 10.0);
}

TEST(PipelineReplay, TimesThatAreNotStagesByMicroBatchesAreRefused) {
  EXPECT_THROW(replay_schedule(ScheduleKind::GPipe, {}, {}), std::invalid_argument);
  EXPECT_THROW(replay_schedule(ScheduleKind::GPipe, pass_times({1.0, 1.0}, 2), pass_times({1.0}, 2)),
               std::invalid_argument);
  EXPECT_THROW(replay_schedule(ScheduleKind::OneFOneB, pass_times({1.0, 1.0}, 2), pass_times({1.0, 1.0}, 3)),
               std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Where the cuts go

TEST(StagePartition, BalancedByParametersOnTheMlp) {
  // mlp [32]: Flatten (0), Linear 784x32 (25,120), ReLU (0), Linear 32x10 (330).
  const std::vector<double> counts{0, 25120, 0, 330};
  // Cuts at 2 and 3 both leave 25,120 in the largest stage; 2 gives it the fewer layers.
  EXPECT_EQ(balanced_bounds(counts, 2), (StageBounds{0, 2, 4}));
  EXPECT_EQ(balanced_bounds(counts, 4), (StageBounds{0, 1, 2, 3, 4}));
  EXPECT_EQ(balanced_bounds({1, 1, 1, 1, 1, 1}, 3), (StageBounds{0, 2, 4, 6}));
  EXPECT_EQ(balanced_bounds({5, 1, 1, 1, 1, 1}, 2), (StageBounds{0, 1, 6}));
  EXPECT_EQ(balanced_bounds({1, 2, 3, 4, 5, 6, 7, 8, 9}, 3), (StageBounds{0, 5, 7, 9}));  // 15 | 13 | 17
  EXPECT_THROW(balanced_bounds({1, 1}, 3), std::invalid_argument);
}

TEST(StagePartition, LeNet5ByParametersAndTheModelsOwnCounts) {
  auto cfg = config::parse_run_config("", "<t>", {"model.name=lenet5"});
  const auto model = testing::build_model(cfg, 1);
  const auto counts = layer_parameter_counts(*model);
  // conv 156, relu, pool, conv 2,416, relu, pool, flatten, fc 48,120, relu, fc 10,164, relu, fc 850
  ASSERT_EQ(counts, (std::vector<double>{156, 0, 0, 2416, 0, 0, 0, 48120, 0, 10164, 0, 850}));
  // The bottleneck is fc1 with everything before it (50,692); the rest goes to stage 1.
  EXPECT_EQ(balanced_bounds(counts, 2), (StageBounds{0, 8, 12}));
  // fc1 is the bottleneck at S = 3 (48,120); the 12 layers go 4 to a stage around it.
  EXPECT_EQ(balanced_bounds(counts, 3), (StageBounds{0, 4, 8, 12}));
  EXPECT_EQ(describe_bounds(StageBounds{0, 8, 12}, counts),
            "stage 0: layers 0-7 (50692 parameters); stage 1: layers 8-11 (11014 parameters)");
}

TEST(StagePartition, ExplicitCutPointsAndTheirErrors) {
  EXPECT_EQ(bounds_from_cut_points({2}, 6, 2), (StageBounds{0, 2, 6}));
  EXPECT_EQ(bounds_from_cut_points({1, 3, 5}, 6, 4), (StageBounds{0, 1, 3, 5, 6}));
  const auto message = [](const std::vector<int>& cuts, int layers, int stages) {
    try {
      bounds_from_cut_points(cuts, layers, stages);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(
      message({3, 2}, 6, 3),
      "parallel.pipeline.cut_points: [3, 2] must be strictly increasing layer indices in [1, 5] (the model "
      "has 6 layers); 2 is not");
  EXPECT_EQ(message({6}, 6, 2).rfind("parallel.pipeline.cut_points: [6] must be", 0), 0u);
  EXPECT_EQ(message({2}, 6, 3).rfind("parallel.pipeline.cut_points: 3 stages need 2 cut points", 0), 0u);
}

TEST(StagePartition, MeasuredTimesArePositiveAndLeaveTheModelAsItWas) {
  auto cfg = config::parse_run_config("", "<t>", {"model.name=lenet5"});
  auto model = testing::build_model(cfg, 1);
  const auto before = testing::snapshot(*model);
  const auto seconds = measure_layer_seconds(*model, models::InputSpec::image(1, 28, 28, 10), 4, 1);
  ASSERT_EQ(seconds.size(), 12u);
  for (const auto s : seconds) EXPECT_GT(s, 0.0);
  EXPECT_TRUE(model->is_training());
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_EQ(testing::max_relative_difference(testing::snapshot(*model), before), 0.0);
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
