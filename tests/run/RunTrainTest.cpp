// run::train with a communicator of the program's own: every rank calls it, and together they are
// one run in one run folder, as `dtrain train --nproc 2` would make: rank 0 writes config.yaml,
// the checkpoints, model.pt and results.json; each rank its own log.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <fstream>
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/JsonFile.h"
#include "dtrain/run/Run.h"
#include "support/ScratchDir.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::run {
namespace {

// A tiny run of `strategy`: the trainer tests' small configuration, plain SGD for one epoch.
config::RunConfig tiny_run(const std::string& strategy) {
  auto c = train::testing::small_trainer_config("library");
  c.nproc = 2;  // the job's size: not refused when the program brings its communicator
  c.data.synthetic_size = 128;
  c.optim.name = "sgd";
  c.optim.lr = 0.05;
  c.parallel.strategy = strategy;
  c.train.epochs = 1;
  c.train.seed = 3;
  c.train.log_every_steps = 50;
  return c;
}

TEST(RunTrain, TwoRanksWithTheProgramsCommunicatorAreOneRun) {
  testing::ScratchDir dir;
  TrainOptions options;
  options.run_dir = (dir / "run").string();
  std::atomic<int> failures{0};
  testing::run_world(2, [&](comm::CommunicatorPtr communicator) {
    if (train(tiny_run("data_parallel"), options, communicator) != 0) ++failures;
  });
  ASSERT_EQ(failures.load(), 0);
  const auto results = io::read_json_file(dir / "run" / "results.json");
  EXPECT_EQ(results.at("status"), "finished");
  EXPECT_EQ(results.at("world_size"), 2);
  EXPECT_EQ(results.at("strategy"), "data_parallel");
  // 128 samples over 2 ranks of 16 a step: 4 steps.
  EXPECT_EQ(results.at("steps"), 4);
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "run" / "model.pt"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "run" / "site_1" / "log.txt"));
  const auto checkpoint = io::CheckpointStore(dir / "run" / "checkpoints").load_latest();
  ASSERT_TRUE(checkpoint.has_value());
  EXPECT_EQ(checkpoint->metadata().at("world_size"), 2);
}

TEST(RunTrain, ARefusedSettingIsTheExitStatusOfAUsageError) {
  testing::ScratchDir dir;
  TrainOptions options;
  options.run_dir = (dir / "run").string();
  auto config = tiny_run("data_parallel");
  config.optim.lr = -1;
  std::atomic<int> usage{0};
  testing::run_world(2, [&](comm::CommunicatorPtr communicator) {
    if (train(config, options, communicator) == 2) ++usage;
  });
  EXPECT_EQ(usage.load(), 2);
}

// results.json counts epochs as the metrics files do: a run stopped within its first epoch trained
// in epoch 1, and completed none.
TEST(RunTrain, ResultsNameTheEpochTheMetricsName) {
  testing::ScratchDir dir;
  TrainOptions options;
  options.run_dir = (dir / "run").string();
  auto config = tiny_run("local");
  config.nproc = 1;
  config.train.max_steps = 3;  // of 8 an epoch
  ASSERT_EQ(train(config, options), 0);
  const auto results = io::read_json_file(dir / "run" / "results.json");
  EXPECT_EQ(results.at("steps"), 3);
  EXPECT_EQ(results.at("epochs"), 1);
  EXPECT_EQ(results.at("epochs_completed"), 0);
  std::ifstream metrics(dir / "run" / "metrics.jsonl");
  nlohmann::json last_eval;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("val/top1")) last_eval = j;
  }
  ASSERT_FALSE(last_eval.is_null());
  EXPECT_EQ(last_eval.at("epoch"), results.at("epochs"));
}

}  // namespace
}  // namespace dtrain::run
