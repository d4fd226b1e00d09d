// `dtrain train` with parallel.strategy zero through the real binary: two workers started by
// --nproc train with stage 3, checkpoint, and the run resumes from that checkpoint as zero stage 3
// and as data_parallel, continuing the step count; four workers on parallel.mesh {dp_replicate: 2,
// dp_shard: 2} (HSDP) end where zero on four workers without a mesh ends; a zero option that does not
// apply, and a mesh that does not fit the job, are refused in one line naming the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/CliTestUtil.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

class ZeroCommand : public ::testing::Test {
 protected:
  fs::path write_config() {
    const auto path = dir_ / "zero.yaml";
    std::ofstream(path) << "name: zero-e2e\n"
                           "out_dir: "
                        << (dir_ / "runs").string()
                        << "\n"
                           "nproc: 2\n"
                           "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, "
                           "synthetic_size: 256,\n"
                           "       batch_size: 16, test_subset_size: 64}\n"
                           "model: {name: mlp, hidden: [15]}\n"
                           "optim: {name: adam, lr: 0.01}\n"
                           "parallel: {strategy: zero, backend: gloo, timeout_s: 60, zero: {stage: 3}}\n"
                           "train: {epochs: 1, log_every_steps: 4, checkpoint_every_epochs: 1, seed: 3}\n";
    return path;
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(ZeroCommand, TwoWorkersTrainCheckpointAndResumeAsZeroAndAsDataParallel) {
  const auto cfg = write_config();
  const auto first = run("train " + cfg.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto results = last_json_line(first.out);
  EXPECT_EQ(results["world_size"], 2);
  EXPECT_EQ(results["strategy"], "zero");
  EXPECT_EQ(results["steps"], 256 / (16 * 2));
  EXPECT_GT(results["final"]["samples"].get<int>(), 0);  // evaluated with the gathered parameters
  EXPECT_GT(results["comm"]["reduce_scatter"]["calls"].get<int>(), 0);
  EXPECT_GT(results["comm"]["allgather"]["calls"].get<int>(), 0);
  const fs::path run_dir = results["run_dir"].get<std::string>();
  for (const auto* f : {"model.pt", "checkpoints/latest"}) EXPECT_TRUE(fs::exists(run_dir / f)) << f;

  // The same run one epoch further, as zero stage 3 and as data_parallel: the step count goes on.
  const auto zero =
      run("train " + cfg.string() + " train.epochs=2 --resume " + run_dir.string(), dir_.path());
  ASSERT_EQ(zero.exit_code, 0) << zero.err;
  EXPECT_EQ(last_json_line(zero.out)["steps"], 2 * 256 / (16 * 2));
  std::string file;
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints")) {
    if (e.path().extension() == ".ckpt")
      file = file.empty() ? e.path().string() : std::min(file, e.path().string());
  }
  const auto dp =
      run("train " + cfg.string() +
              " train.epochs=2 parallel.strategy=data_parallel parallel.zero=null --resume " + file,
          dir_.path());
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  const auto dp_results = last_json_line(dp.out);
  EXPECT_EQ(dp_results["strategy"], "data_parallel");
  EXPECT_EQ(dp_results["steps"], 2 * 256 / (16 * 2));
}

TEST_F(ZeroCommand, HybridShardingOnFourWorkersEndsWhereZeroEnds) {
  const auto cfg = write_config();
  const std::string four = "train " + cfg.string() + " --nproc 4 train.checkpoint_every_epochs=0 ";
  const auto plain = run(four, dir_.path());
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto hsdp = run(four + "parallel.mesh.dp_replicate=2 parallel.mesh.dp_shard=2", dir_.path());
  ASSERT_EQ(hsdp.exit_code, 0) << hsdp.err;
  const auto expected = last_json_line(plain.out);
  const auto results = last_json_line(hsdp.out);
  EXPECT_EQ(results["world_size"], 4);
  EXPECT_EQ(results["steps"], expected["steps"]);
  EXPECT_EQ(results["config"]["parallel"]["mesh"]["dp_shard"], 2);
  EXPECT_NE(results["strategy_notes"]["zero/layout"].get<std::string>().find("hybrid (HSDP)"),
            std::string::npos);
  // The replicas' all-reduce is traffic of the strategy's own.
  EXPECT_GT(results["comm"]["allreduce"]["calls"].get<int>(),
            expected["comm"]["allreduce"]["calls"].get<int>());
  for (const auto* metrics : {"final", "train_last_epoch"}) {
    EXPECT_NEAR(results[metrics]["loss"].get<double>(), expected[metrics]["loss"].get<double>(), 1e-5)
        << metrics;
  }
}

TEST_F(ZeroCommand, MeshThatDoesNotFitTheJobIsRefusedNamingTheKey) {
  const auto cfg = write_config();
  const auto r =
      run("train " + cfg.string() + " parallel.mesh.dp_replicate=2 parallel.mesh.dp_shard=2", dir_.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("parallel.mesh: pp 1 x dp_replicate 2 x dp_shard 2 = 4 ranks, but the job has 2"),
            std::string::npos)
      << r.err;
}

TEST_F(ZeroCommand, PrefetchWithoutStage3IsRefusedNamingTheKey) {
  const auto cfg = write_config();
  const auto r =
      run("train " + cfg.string() + " parallel.zero.stage=2 parallel.zero.prefetch=false", dir_.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("parallel.zero.prefetch"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

}  // namespace
