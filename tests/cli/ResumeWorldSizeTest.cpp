// Resuming a run on another number of workers (Note [Resuming on another number of workers]):
// it continues, and rank 0 says once that the data partition changed, naming both world sizes.
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

class ResumeWorldSize : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = dir_ / "run.yaml";
    std::ofstream(cfg_) << "name: resume\nout_dir: " << (dir_ / "runs").string()
                        << "\nnproc: 2\n"
                           "data: {dataset: synthetic, synthetic_shape: [1, 4, 4], synthetic_classes: 2, "
                           "synthetic_size: 128, batch_size: 8, test_subset_size: 16}\n"
                           "model: {name: mlp, hidden: [8]}\n"
                           "parallel: {strategy: data_parallel, backend: gloo, timeout_s: 60}\n"
                           "train: {epochs: 1, max_steps: 2, checkpoint_every_steps: 2, seed: 1}\n";
  }

  dtrain::testing::ScratchDir dir_;
  fs::path cfg_;
};

TEST_F(ResumeWorldSize, TwoWorkersOnOneContinuesAndSaysThePartitionChanged) {
  const auto first = run("train " + cfg_.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto before = last_json_line(first.out);
  ASSERT_EQ(before["world_size"], 2);
  const std::string run_dir = before["run_dir"];

  const auto second =
      run("train " + cfg_.string() + " nproc=1 train.max_steps=4 --resume " + run_dir, dir_.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto after = last_json_line(second.out);
  EXPECT_EQ(after["world_size"], 1);
  EXPECT_EQ(after["steps"], 4);
  EXPECT_NE(after["data_partition_hash"], before["data_partition_hash"]);
  EXPECT_NE(second.err.find("the checkpoint was written by 2 worker(s), this run has 1"), std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find("the epoch finishes on the samples it had left"), std::string::npos)
      << second.err;
  EXPECT_NE(second.err.find("resume with --nproc 2"), std::string::npos) << second.err;

  // The resume continued in the run's folder, so its last checkpoint is the one-worker run's; back on
  // two workers it says so, and the same number of workers after that continues and says nothing.
  const auto third = run("train " + cfg_.string() + " train.max_steps=6 --resume " + run_dir, dir_.path());
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(last_json_line(third.out)["run_dir"], run_dir);
  EXPECT_NE(third.err.find("the checkpoint was written by 1 worker(s), this run has 2"), std::string::npos)
      << third.err;
  const auto fourth = run("train " + cfg_.string() + " train.max_steps=8 --resume " + run_dir, dir_.path());
  ASSERT_EQ(fourth.exit_code, 0) << fourth.err;
  EXPECT_EQ(last_json_line(fourth.out)["steps"], 8);
  EXPECT_EQ(fourth.err.find("worker(s), this run has"), std::string::npos) << fourth.err;
}

}  // namespace
