// Note [Stopping on a signal]: SIGTERM to a training run, alone and as a job of two workers, ends it
// as a run that stopped early: exit status 128 + 15, results.json saying interrupted with the signal
// and step, and a checkpoint at that step, from which --resume continues.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/CliTestUtil.h"
#include "dtrain/io/JsonFile.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::read_file;
using dtrain::testing::run;
using dtrain::testing::spawn;

class Interrupt : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    config_ = dir_ / "long.yaml";
    // 64 steps an epoch and 500 epochs: far more than the time the test waits before its signal.
    std::ofstream(config_)
        << "name: long\nout_dir: " << (dir_ / "runs").string() << "\nnproc: " << GetParam()
        << "\ndata: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 2, "
           "synthetic_size: 1024, batch_size: 8, test_subset_size: 32}\n"
           "model: {name: mlp, hidden: [16]}\n"
           "parallel: {strategy: data_parallel, backend: gloo, timeout_s: 60}\n"
           "train: {epochs: 500, log_every_steps: 4, checkpoint_every_epochs: 0}\n";
  }

  // The run folder once its metrics show training under way (the job's first log step), polled.
  fs::path wait_for_training() const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (fs::is_directory(dir_ / "runs")) {
        for (const auto& entry : fs::directory_iterator(dir_ / "runs")) {
          const auto metrics = entry.path() / "metrics.jsonl";
          if (fs::exists(metrics) && fs::file_size(metrics) > 0) return entry.path();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // between polls of the condition
    }
    return {};
  }

  dtrain::testing::ScratchDir dir_;
  fs::path config_;
};

TEST_P(Interrupt, SigtermEndsTheRunWithItsResultsAndACheckpoint) {
  const pid_t job =
      spawn({DTRAIN_BINARY, "train", config_.string()}, dir_.path() / "job.out", dir_.path() / "job.err");
  ASSERT_GT(job, 0);
  const auto run_dir = wait_for_training();
  ASSERT_FALSE(run_dir.empty()) << read_file(dir_.path() / "job.err");
  ASSERT_EQ(::kill(job, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  const auto err = read_file(dir_.path() / "job.err");
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << err;

  const auto results = dtrain::io::read_json_file(run_dir / "results.json");
  EXPECT_EQ(results["status"], "interrupted") << results;
  const std::int64_t steps = results["steps"];
  EXPECT_EQ(results["stop_reason"], "interrupted by SIGTERM at step " + std::to_string(steps));
  EXPECT_LT(steps, 500 * 1024 / 8 / GetParam());
  if (GetParam() > 1) {
    EXPECT_EQ(steps % 4, 0) << "several workers stop at a log step";
  }
  EXPECT_TRUE(fs::exists(run_dir / "model.pt"));
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%012lld.ckpt", static_cast<long long>(steps));
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / name)) << name;

  // The run goes on from there.
  const auto resumed = run(
      "train --resume " + run_dir.string() + " train.max_steps=" + std::to_string(steps + 4), dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(last_json_line(resumed.out)["steps"], steps + 4);
  EXPECT_EQ(last_json_line(resumed.out)["status"], "finished");
}

INSTANTIATE_TEST_SUITE_P(Workers, Interrupt, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "_workers"; });

}  // namespace
