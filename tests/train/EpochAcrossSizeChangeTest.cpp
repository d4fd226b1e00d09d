// An epoch across a size change (Note [An epoch across a size change] in data/EpochRemainder.h):
// saved mid-epoch by 3 ranks and continued by 2 (and then by 4), the epoch trains every sample
// once, ends after train.epochs, and a checkpoint within the rest continues it exactly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <nlohmann/json.hpp>

#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

// 120 samples, each its own class, so an epoch's per-class target counts say how often each
// sample was trained on. 3 ranks: 40 samples each, 5 batches of 8; 2 ranks: 60, 8 batches (the
// last of 4); 4 ranks: 30, 4 batches (the last of 6).
config::RunConfig config_for(const std::string& equalize) {
  auto c = testing::small_trainer_config("epoch-across-sizes");
  c.data.synthetic_classes = 120;
  c.data.synthetic_size = 120;
  c.data.batch_size = 8;
  c.data.drop_last = false;
  c.data.equalize = config::kEqualizeNames.parse(equalize, "data.equalize");
  c.optim.name = "sgd";
  c.parallel.strategy = "data_parallel";
  c.train.epochs = 2;
  return c;
}

struct EpochEnds : Callback {
  void on_epoch_end(Trainer&, const EpochEvent& e) override { train.push_back(e.train); }
  std::vector<EvalMetrics> train;
};

// Trains `world` ranks from `checkpoint` (empty: from the start) until step `stop` (0: the end),
// and saves into it; returns rank 0's epoch ends and its step after the load.
struct Generation {
  std::vector<EvalMetrics> epochs;
  std::int64_t loaded_step = 0;
  std::int64_t total_steps = 0;
  TrainResult result;
  std::map<std::string, torch::Tensor> model;
};

Generation train_generation(const config::RunConfig& config, int world, io::Checkpoint& checkpoint,
                            std::int64_t stop) {
  Generation out;
  io::Checkpoint saved;
  dtrain::testing::run_world(world, [&](std::shared_ptr<comm::Communicator> comm) {
    Trainer trainer(config, comm);
    if (!checkpoint.metadata().empty()) trainer.load_state(checkpoint);
    auto ends = std::make_shared<EpochEnds>();
    trainer.add_callback(ends);
    if (stop > 0) trainer.add_callback(std::make_shared<testing::StopAt>(stop));
    const auto loaded = trainer.step();
    const auto total = trainer.total_steps();
    auto result = trainer.fit();
    io::Checkpoint mine;
    trainer.save_state(mine);
    if (comm->rank() == 0) {
      out = {ends->train, loaded, total, result, {}};
      for (const auto& [name, value] : trainer.strategy().model_state()) out.model[name] = value.clone();
      saved = std::move(mine);
    }
  });
  checkpoint = std::move(saved);
  return out;
}

void expect_every_sample_once(const EvalMetrics& epoch) {
  ASSERT_EQ(epoch.class_samples.size(), 120u);
  for (std::size_t c = 0; c < 120; ++c) EXPECT_EQ(epoch.class_samples[c], 1) << "sample of class " << c;
  EXPECT_EQ(epoch.samples, 120);
}

class EpochAcrossSizes : public ::testing::TestWithParam<std::string> {};

TEST_P(EpochAcrossSizes, ThreeRanksThenTwoThenFourTrainEverySampleOnce) {
  const auto config = config_for(GetParam());
  io::Checkpoint checkpoint;
  train_generation(config, 3, checkpoint, 2);  // 2 of the epoch's 5 steps: 48 samples
  // 72 left: 4 steps of 2 x 8, then 4 each (5 steps); 2 ranks count 8 steps an epoch, so it is at step 3.
  const auto two = train_generation(config, 2, checkpoint, 5);
  EXPECT_EQ(two.loaded_step, 3);
  EXPECT_EQ(two.total_steps, 16);
  // 2 steps at 2 ranks read 32 of the 72; 40 left: 1 step of 4 x 8, then 2 each (join: 2 each too).
  const auto four = train_generation(config, 4, checkpoint, 0);
  EXPECT_EQ(four.loaded_step, 2);
  EXPECT_EQ(four.total_steps, 8);
  ASSERT_EQ(four.epochs.size(), 2u);
  expect_every_sample_once(four.epochs[0]);
  expect_every_sample_once(four.epochs[1]);
  EXPECT_EQ(four.result.steps, 8);
  EXPECT_EQ(four.result.epochs_completed, 2);
}

TEST_P(EpochAcrossSizes, ACheckpointWithinTheRestContinuesItExactly) {
  const auto config = config_for(GetParam());
  io::Checkpoint start;
  train_generation(config, 3, start, 2);
  io::Checkpoint straight = start, interrupted = start;
  const auto whole = train_generation(config, 2, straight, 0);
  train_generation(config, 2, interrupted, 6);  // within the rest of the first epoch
  const auto resumed = train_generation(config, 2, interrupted, 0);
  EXPECT_EQ(resumed.loaded_step, 6);
  EXPECT_EQ(resumed.result.steps, whole.result.steps);
  ASSERT_EQ(resumed.model.size(), whole.model.size());
  for (const auto& [name, value] : whole.model) {
    EXPECT_TRUE(torch::equal(resumed.model.at(name), value)) << name;
  }
  ASSERT_FALSE(resumed.epochs.empty());
  expect_every_sample_once(resumed.epochs.front());
}

INSTANTIATE_TEST_SUITE_P(Equalize, EpochAcrossSizes, ::testing::Values("pad", "join"));

}  // namespace
}  // namespace dtrain::train
