// `dtrain train` with parallel.strategy zero through the real binary: two workers started by
// --nproc train with stage 3, checkpoint, and the run resumes from that checkpoint as zero stage 3
// and as data_parallel, continuing the step count; a zero option that does not apply is refused
// in one line naming the key.
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

TEST_F(ZeroCommand, PrefetchWithoutStage3IsRefusedNamingTheKey) {
  const auto cfg = write_config();
  const auto r =
      run("train " + cfg.string() + " parallel.zero.stage=2 parallel.zero.prefetch=false", dir_.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("parallel.zero.prefetch"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

}  // namespace
