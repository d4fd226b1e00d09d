// data.equalize: join through the Trainer (parallel: Note [Join]): the schedule decided from the
// share sizes, and two gloo ranks with different numbers of batches that end the epoch together
// with the weights one process computes on each step's concatenated batches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "dtrain/parallel/Registry.h"
#include "dtrain/train/JoinSchedule.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

TEST(JoinSchedule, StepsUntilTheLargestShareEndsAndWeighsRanksBySamples) {
  // Batches of 4: rank 0 draws 4, 4, 4, 1 (drop_last false), rank 1 4, 4, 2, rank 2 none.
  JoinSchedule schedule({13, 10, 0}, 4, /*drop_last=*/false);
  EXPECT_EQ(schedule.batches(0), 4);
  EXPECT_EQ(schedule.batches(1), 3);
  EXPECT_EQ(schedule.batches(2), 0);
  EXPECT_EQ(schedule.steps_per_epoch(), 4);
  EXPECT_EQ(schedule.samples(2), 6);
  EXPECT_EQ(schedule.samples(0, 3), 1);
  EXPECT_DOUBLE_EQ(schedule.weight(0, 0), 1.5);  // 3 ranks x 4 of 8 samples
  EXPECT_DOUBLE_EQ(schedule.weight(1, 2), 3.0 * 2 / 6);
  EXPECT_DOUBLE_EQ(schedule.weight(0, 3), 3.0);
  EXPECT_DOUBLE_EQ(schedule.weight(2, 0), 0.0);
  JoinSchedule dropping({13, 10}, 4, /*drop_last=*/true);
  EXPECT_EQ(dropping.steps_per_epoch(), 3);
  EXPECT_EQ(dropping.batches(1), 2);
}

std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& entry : t.strategy().model_state()) out.push_back(entry.second.clone());
  return out;
}

// data_parallel that records the batches it trains on, with its shadow steps.
class RecordingJoin final : public parallel::Strategy, public parallel::Joinable {
 public:
  static std::vector<std::vector<data::Batch>>& batches() {
    static std::vector<std::vector<data::Batch>> b(2);
    return b;
  }
  static std::vector<int>& shadow_steps() {
    static std::vector<int> s(2);
    return s;
  }

  explicit RecordingJoin(parallel::StrategyContext context)
      : rank_(context.comm->rank()), inner_([&] {
          context.parallel.strategy = "data_parallel";
          return parallel::create_strategy(std::move(context));
        }()) {}

  std::string name() const override { return "recording_join"; }
  parallel::StepResult train_step(const data::Batch& batch) override { return inner_->train_step(batch); }
  void check_joinable() const override { joinable().check_joinable(); }
  parallel::StepResult join_step(const data::Batch* batch, double weight) override {
    if (batch) {
      batches()[rank_].push_back({batch->inputs.clone(), batch->targets.clone()});
    } else {
      ++shadow_steps()[rank_];
    }
    return joinable().join_step(batch, weight);
  }
  void set_learning_rate(double lr) override { inner_->set_learning_rate(lr); }
  torch::Tensor eval_forward(std::size_t i, const torch::Tensor& inputs) override {
    return inner_->eval_forward(i, inputs);
  }
  void begin_evaluation() override { inner_->begin_evaluation(); }
  void end_evaluation() override { inner_->end_evaluation(); }
  std::map<std::string, torch::Tensor> model_state() const override { return inner_->model_state(); }
  void save(io::Checkpoint& checkpoint) const override { inner_->save(checkpoint); }
  void load(const io::Checkpoint& checkpoint) override { inner_->load(checkpoint); }
  comm::CommStats comm_stats() const override { return inner_->comm_stats(); }
  parallel::MemoryFootprint memory_footprint() const override { return inner_->memory_footprint(); }

 private:
  parallel::Joinable& joinable() const { return dynamic_cast<parallel::Joinable&>(*inner_); }

  int rank_;
  std::unique_ptr<parallel::Strategy> inner_;
};

DTRAIN_REGISTER_STRATEGY(recording_join,
                         parallel::StrategyInfo{
                             "recording_join", "data_parallel that records its join steps",
                             /*exact=*/false, /*needs_communicator=*/true,
                             [](parallel::StrategyContext c) -> std::unique_ptr<parallel::Strategy> {
                               return std::make_unique<RecordingJoin>(std::move(c));
                             }});

// 41 training samples over two ranks (20 and 21), batches of 4 with the last one kept: rank 0
// draws 5 batches, rank 1 draws 6 (the last of 1 sample), so rank 0 shadows the last step of each
// epoch. Two epochs: the run ends on both ranks at step 12.
TEST(Trainer, JoinEndsUnevenSharesTogetherWithOneProcessesWeights) {
  auto config = testing::small_trainer_config("join-test");
  config.data.synthetic_size = 41;
  config.data.batch_size = 4;
  config.data.drop_last = false;
  config.data.equalize = config::Equalize::Join;
  config.optim.name = "sgd";
  config.optim.lr = 0.05;
  config.parallel.strategy = "recording_join";
  for (auto& b : RecordingJoin::batches()) b.clear();
  for (auto& s : RecordingJoin::shadow_steps()) s = 0;
  std::vector<std::vector<torch::Tensor>> params(2);
  std::vector<TrainResult> results(2);
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    Trainer t(config, comm);
    EXPECT_EQ(t.steps_per_epoch(), 6);
    results[comm->rank()] = t.fit();
    params[comm->rank()] = parameters_of(t);
  });
  const auto& recorded = RecordingJoin::batches();
  ASSERT_EQ(recorded[0].size(), 10u);
  ASSERT_EQ(recorded[1].size(), 12u);
  EXPECT_EQ(RecordingJoin::shadow_steps()[0], 2);
  EXPECT_EQ(RecordingJoin::shadow_steps()[1], 0);
  EXPECT_EQ(results[0].steps, 12);
  EXPECT_EQ(results[1].steps, 12);

  // One process from the same initial weights: at each step the batches of the ranks that had one.
  auto local_config = testing::small_trainer_config("join-reference");
  local_config.data.synthetic_size = 41;
  local_config.optim = config.optim;
  Trainer reference(local_config, nullptr);
  auto& local = reference.strategy();
  std::size_t next[2] = {0, 0};
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int step = 0; step < 6; ++step) {
      std::vector<torch::Tensor> x, y;
      for (int r = 0; r < 2; ++r) {
        if (step >= (r == 0 ? 5 : 6)) continue;
        x.push_back(recorded[r][next[r]].inputs);
        y.push_back(recorded[r][next[r]].targets);
        ++next[r];
      }
      local.set_learning_rate(config.optim.lr);
      local.train_step({torch::cat(x), torch::cat(y)});
    }
  }
  const auto expected = parameters_of(reference);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(params[r].size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[r][i], expected[i], 1e-5, 1e-6)) << "rank " << r << " tensor " << i;
    }
  }
}

TEST(Trainer, JoinRefusesAStrategyWithoutShadowSteps) {
  auto config = testing::small_trainer_config("join-refused");
  config.data.equalize = config::Equalize::Join;
  config.parallel.strategy = "zero";
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    try {
      Trainer t(config, comm);
      ADD_FAILURE() << "zero accepted data.equalize: join";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("data.equalize: join: parallel.strategy zero cannot run"));
    }
  });
}

}  // namespace
}  // namespace dtrain::train
