// Note [What a resume may change]: --resume continues the run in its own folder, applies the
// settings a resume may change (from CONFIG and overrides, or over the run's own config.yaml when
// no CONFIG is given), refuses the others by name without touching the folder, and records each
// resume in resumes.jsonl with the keys it changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/CliTestUtil.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::read_file;
using dtrain::testing::run;

class ResumeConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = dir_ / "run.yaml";
    std::ofstream(cfg_) << "name: resume\nout_dir: " << (dir_ / "runs").string()
                        << "\nnproc: 1\n"
                           "data: {dataset: synthetic, synthetic_shape: [1, 4, 4], synthetic_classes: 2, "
                           "synthetic_size: 64, batch_size: 8, test_subset_size: 16}\n"
                           "model: {name: mlp, hidden: [8]}\n"
                           "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                           "parallel: {strategy: local}\n"
                           "train: {epochs: 1, seed: 1}\n";
  }

  std::vector<nlohmann::json> resumes(const std::string& run_dir) const {
    std::vector<nlohmann::json> lines;
    std::istringstream in(read_file(fs::path(run_dir) / "resumes.jsonl"));
    for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
    return lines;
  }

  dtrain::testing::ScratchDir dir_;
  fs::path cfg_;
};

TEST_F(ResumeConfig, OverridesThatMayChangeApplyInTheRunsFolderAndAreRecorded) {
  const auto first = run("train " + cfg_.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string run_dir = last_json_line(first.out)["run_dir"];
  EXPECT_EQ(last_json_line(first.out)["steps"], 8);

  // CONFIG and an override after --resume: the same folder goes on to epoch 2.
  const auto second = run("train " + cfg_.string() + " --resume " + run_dir + " train.epochs=2", dir_.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto after = last_json_line(second.out);
  EXPECT_EQ(after["run_dir"], run_dir);
  EXPECT_EQ(after["steps"], 16);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "runs"), fs::directory_iterator{}), 1);
  EXPECT_NE(read_file(fs::path(run_dir) / "config.yaml").find("epochs: 2"), std::string::npos);
  EXPECT_NE(second.err.find("resumed from " + run_dir + " at step 8: train.epochs 1 -> 2"), std::string::npos)
      << second.err;

  // --resume alone: the run's own configuration (lr 0.05, not the default), one more epoch.
  const auto third = run("train --resume " + run_dir + " train.epochs=3", dir_.path());
  ASSERT_EQ(third.exit_code, 0) << third.err;
  const auto last = last_json_line(third.out);
  EXPECT_EQ(last["steps"], 24);
  EXPECT_EQ(last["config"]["optim"]["lr"], 0.05);
  EXPECT_EQ(last["config"]["optim"]["momentum"], 0.9);

  const auto lines = resumes(run_dir);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["step"], 8);
  EXPECT_EQ(lines[0]["changes"]["train.epochs"]["was"], 1);
  EXPECT_EQ(lines[0]["changes"]["train.epochs"]["now"], 2);
  EXPECT_EQ(lines[1]["step"], 16);
  EXPECT_EQ(lines[1]["changes"].size(), 1u);
}

TEST_F(ResumeConfig, ASettingThatWouldTrainOtherWeightsIsRefusedByName) {
  const auto first = run("train " + cfg_.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string run_dir = last_json_line(first.out)["run_dir"];
  const auto saved = read_file(fs::path(run_dir) / "config.yaml");
  for (const std::string change :
       {"optim.lr=0.1", "model.hidden=[16]", "train.seed=2", "data.batch_size=4"}) {
    SCOPED_TRACE(change);
    const auto refused = run("train --resume " + run_dir + " train.epochs=2 " + change, dir_.path());
    EXPECT_EQ(refused.exit_code, 2);
    const auto key = change.substr(0, change.find('='));
    EXPECT_NE(refused.err.find("--resume: " + key + " is "), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("start a new run"), std::string::npos) << refused.err;
    EXPECT_EQ(read_file(fs::path(run_dir) / "config.yaml"), saved);
    EXPECT_FALSE(fs::exists(fs::path(run_dir) / "resumes.jsonl"));
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "runs"), fs::directory_iterator{}), 1);
}

// train.keep_checkpoints: the newest N checkpoint files stay, and the run resumes from the newest.
TEST_F(ResumeConfig, KeepCheckpointsLeavesTheNewestN) {
  const auto first =
      run("train " + cfg_.string() + " train.checkpoint_every_steps=2 train.keep_checkpoints=2", dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string run_dir = last_json_line(first.out)["run_dir"];
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(fs::path(run_dir) / "checkpoints")) {
    if (entry.path().extension() == ".ckpt") kept.push_back(entry.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"checkpoint-000000000006.ckpt", "checkpoint-000000000008.ckpt"}));
  const auto resumed = run("train --resume " + run_dir + " train.epochs=2", dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("at step 8"), std::string::npos) << resumed.err;
}

// Note [What a run records]: --nproc is the configuration's nproc, in config.yaml, results.json and
// --print-config; a resume goes on with the workers that ran, exactly where the run stopped.
TEST_F(ResumeConfig, TheNprocFlagIsRecordedAndAResumeKeepsIt) {
  const std::string flags = " parallel.strategy=data_parallel nproc=2 --nproc 1";
  const auto printed = run("train " + cfg_.string() + flags + " --print-config", dir_.path());
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_NE(printed.out.find("nproc: 1\n"), std::string::npos) << printed.out;
  const auto first = run("train " + cfg_.string() + flags + " train.checkpoint_every_steps=4", dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto results = last_json_line(first.out);
  const std::string run_dir = results["run_dir"];
  EXPECT_EQ(results["config"]["nproc"], 1);
  EXPECT_EQ(results["world_size"], 1);
  EXPECT_NE(read_file(fs::path(run_dir) / "config.yaml").find("nproc: 1\n"), std::string::npos);

  const auto resumed = run("train --resume " + run_dir + " train.epochs=2", dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto after = last_json_line(resumed.out);
  EXPECT_EQ(after["world_size"], 1);
  EXPECT_EQ(after["strategy"], "data_parallel");
  EXPECT_EQ(after["steps"], 16);
  EXPECT_NE(resumed.err.find("at step 8: train.epochs 1 -> 2"), std::string::npos) << resumed.err;
}

// A resume that would train nothing is refused, naming both numbers, and leaves the folder as it was.
TEST_F(ResumeConfig, MaxStepsBelowTheResumedStepIsRefused) {
  const auto first = run("train " + cfg_.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string run_dir = last_json_line(first.out)["run_dir"];
  const auto config = read_file(fs::path(run_dir) / "config.yaml");
  const auto results = read_file(fs::path(run_dir) / "results.json");
  const auto refused = run("train --resume " + run_dir + " train.max_steps=5", dir_.path());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("train.max_steps 5 is below step 8"), std::string::npos) << refused.err;
  EXPECT_EQ(read_file(fs::path(run_dir) / "config.yaml"), config);
  EXPECT_EQ(read_file(fs::path(run_dir) / "results.json"), results);
}

// Note [A resume under another strategy]: the sections the saved strategy wrote with their defaults
// do not stand in the way of a resume under another strategy.
TEST_F(ResumeConfig, AResumeMayChangeTheStrategy) {
  const auto first = run("train " + cfg_.string() + " parallel.strategy=data_parallel", dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string run_dir = last_json_line(first.out)["run_dir"];
  ASSERT_NE(read_file(fs::path(run_dir) / "config.yaml").find("data_parallel:"), std::string::npos);
  const auto resumed =
      run("train --resume " + run_dir + " parallel.strategy=local train.epochs=2", dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto after = last_json_line(resumed.out);
  EXPECT_EQ(after["strategy"], "local");
  EXPECT_EQ(after["steps"], 16);
  EXPECT_EQ(read_file(fs::path(run_dir) / "config.yaml").find("data_parallel:"), std::string::npos);
}

}  // namespace
