// `dtrain train` with parallel.strategy: pipeline end to end, through the real binary: two workers
// as one 2-stage pipeline on a small synthetic set train, evaluate through the pipeline, checkpoint,
// and resume, as a pipeline and as data_parallel; four as two pipelines whose stages shard over dp_shard.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/CliTestUtil.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

class PipelineCommand : public ::testing::Test {
 protected:
  // `parallel` is the configuration's parallel section (only the chosen strategy's options may
  // appear in it).
  fs::path write_config(const std::string& parallel =
                            "{strategy: pipeline, backend: gloo, timeout_s: 60,\n"
                            "           pipeline: {schedule: 1f1b, stages: 2, micro_batches: 4}}",
                        const std::string& file = "pipeline.yaml") {
    const auto path = dir_ / file;
    std::ofstream(path) << "name: pipe\n"
                           "out_dir: "
                        << (dir_ / "runs").string()
                        << "\n"
                           "nproc: 2\n"
                           "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, "
                           "synthetic_size: 512,\n"
                           "       batch_size: 16, test_subset_size: 64}\n"
                           "model: {name: mlp, hidden: [16, 16]}\n"
                           "optim: {name: adam, lr: 0.01}\n"
                           "parallel: "
                        << parallel
                        << "\n"
                           "train: {epochs: 1, log_every_steps: 4, checkpoint_every_epochs: 1, seed: 3}\n";
    return path;
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(PipelineCommand, TwoStagesTrainEvaluateCheckpointAndResume) {
  const auto cfg = write_config();
  const auto first = run("train " + cfg.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto results = last_json_line(first.out);
  EXPECT_EQ(results["strategy"], "pipeline");
  EXPECT_EQ(results["world_size"], 2);
  EXPECT_EQ(results["steps"], 512 / (16 * 2));
  // Evaluated through the pipeline by its last stage: the whole test subset once.
  EXPECT_EQ(results["final"]["samples"], 64);
  // The same mathematics as data_parallel on the same two ranks' batches (a pipeline's batch is
  // its ranks' batches together): the same final loss, up to float32 rounding.
  const auto dp_cfg = write_config("{strategy: data_parallel, backend: gloo, timeout_s: 60}", "dp.yaml");
  const auto dp = run("train " + dp_cfg.string() + " name=dp", dir_.path());
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  const auto dp_results = last_json_line(dp.out);
  EXPECT_NEAR(results["final"]["loss"].get<double>(), dp_results["final"]["loss"].get<double>(), 1e-4)
      << results["final"].dump() << " against " << dp_results["final"].dump();
  EXPECT_GT(results["comm"]["send"]["calls"].get<int>(), 0) << results["comm"].dump();
  EXPECT_NE(results["strategy_notes"]["pipeline/stages"].get<std::string>().find("stage 1: layers"),
            std::string::npos);
  EXPECT_TRUE(results["strategy_metrics"].contains("pipeline/idle_fraction/stage0"));
  EXPECT_EQ(results["strategy_metrics"]["pipeline/peak_micro_batches/stage0"], 2.0);
  const fs::path run_dir = results["run_dir"].get<std::string>();
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / "latest"));
  EXPECT_TRUE(fs::exists(run_dir / "model.pt"));

  // One more epoch from the checkpoint, as a pipeline with the other schedule ...
  const auto second = run("train " + cfg.string() +
                              " train.epochs=2 parallel.pipeline.schedule=gpipe --resume " + run_dir.string(),
                          dir_.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(last_json_line(second.out)["steps"], 2 * 512 / (16 * 2));

  // ... and as data_parallel, which reads the same names.
  const auto third =
      run("train " + dp_cfg.string() + " train.epochs=3 --resume " + run_dir.string(), dir_.path());
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(last_json_line(third.out)["steps"], 3 * 512 / (16 * 2));
}

// Four workers on the mesh {pp: 2, dp_shard: 2}: two pipelines whose stages shard their gradients
// and Adam state train as data_parallel does on the same four workers' batches.
TEST_F(PipelineCommand, StagesShardedOverDpShardTrainAsDataParallelDoes) {
  const auto cfg = write_config(
      "{strategy: pipeline, backend: gloo, timeout_s: 60, mesh: {pp: 2, dp_shard: 2},\n"
      "           pipeline: {micro_batches: 2}}");
  const auto sharded = run("train " + cfg.string() + " nproc=4", dir_.path());
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  const auto results = last_json_line(sharded.out);
  EXPECT_NE(results["strategy_notes"]["pipeline/stages"].get<std::string>().find(
                "gradients and optimizer state sharded over dp_shard 2"),
            std::string::npos)
      << results["strategy_notes"].dump();
  const auto dp_cfg = write_config("{strategy: data_parallel, backend: gloo, timeout_s: 60}", "dp.yaml");
  const auto dp = run("train " + dp_cfg.string() + " nproc=4 name=dp", dir_.path());
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  const auto dp_results = last_json_line(dp.out);
  EXPECT_EQ(results["steps"], dp_results["steps"]);
  EXPECT_NEAR(results["final"]["loss"].get<double>(), dp_results["final"]["loss"].get<double>(), 1e-4)
      << results["final"].dump() << " against " << dp_results["final"].dump();
}

TEST_F(PipelineCommand, StagesThatDoNotDivideTheWorkersAreOneLineBeforeAnyWorkerStarts) {
  const auto out = run("train " + write_config().string() + " parallel.pipeline.stages=3", dir_.path());
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("parallel.pipeline.stages: 3 stages do not divide the world size 2"),
            std::string::npos)
      << out.err;
  EXPECT_EQ(out.err.find("frame #"), std::string::npos) << out.err;
}

}  // namespace
