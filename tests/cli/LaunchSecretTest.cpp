// `dtrain launch --secret-file` end to end, through the real binary: two workers that are given
// the secret's path join the store and train; workers that hold another secret are refused, with a
// line on each side naming the other; a secret file that others can read stops the launch before
// anything starts. The secret itself shows in no output.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/CliTestUtil.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

constexpr const char* kSecret = "9f2c7e41d0b85a63";

class LaunchSecret : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_ / "e2e.yaml";
    std::ofstream(config_)
        << "name: secret\nout_dir: " << (dir_ / "runs").string()
        << "\ndata: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, "
           "synthetic_size: 256, batch_size: 16, test_subset_size: 32}\n"
           "model: {name: mlp, hidden: [16]}\n"
           "optim: {name: sgd, lr: 0.1}\n"
           "parallel: {strategy: data_parallel, backend: gloo, timeout_s: 30}\n"
           "train: {epochs: 1, checkpoint_every_epochs: 0, seed: 3}\n";
  }

  fs::path secret_file(const std::string& name, const std::string& secret, unsigned mode = 0600) {
    const auto path = dir_ / name;
    std::ofstream(path) << secret << "\n";
    ::chmod(path.c_str(), mode);
    return path;
  }

  std::string worker() const { return std::string(DTRAIN_BINARY) + " train " + config_.string(); }

  dtrain::testing::ScratchDir dir_;
  fs::path config_;
};

TEST_F(LaunchSecret, TwoRanksWithTheSecretTrain) {
  const auto secret = secret_file("job.secret", kSecret);
  const auto out = run("launch --secret-file " + secret.string() + " --nproc-per-node 2 --log-dir " +
                           (dir_ / "logs").string() + " -- " + worker(),
                       dir_.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto results = last_json_line(out.out);
  EXPECT_EQ(results["world_size"], 2);
  EXPECT_EQ(results["steps"], 256 / (16 * 2));
  EXPECT_EQ(out.err.find(kSecret), std::string::npos);
  EXPECT_EQ(out.out.find(kSecret), std::string::npos);
  EXPECT_EQ(out.err.find("refused"), std::string::npos) << out.err;
}

TEST_F(LaunchSecret, WorkersWithAnotherSecretAreRefused) {
  const auto secret = secret_file("job.secret", kSecret);
  const auto other = secret_file("other.secret", "not the job's secret");
  const auto out =
      run("launch --secret-file " + secret.string() + " --nproc-per-node 2 --timeout 20 -- env " +
              "DTRAIN_SECRET_FILE=" + other.string() + " " + worker(),
          dir_.path());
  EXPECT_NE(out.exit_code, 0);
  // The store's side names the worker's address, the worker's side the store's.
  EXPECT_NE(out.err.find("refused the connection from 127.0.0.1:"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("wrong secret"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("refused this process's secret"), std::string::npos) << out.err;
  EXPECT_EQ(out.err.find(kSecret), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "a refused worker started a run";
}

TEST_F(LaunchSecret, SecretFileOthersCanReadStopsTheLaunch) {
  const auto secret = secret_file("job.secret", kSecret, 0644);
  const auto out =
      run("launch --secret-file " + secret.string() + " --nproc-per-node 2 -- " + worker(), dir_.path());
  EXPECT_NE(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.err.find("rendezvous store at"), std::string::npos) << "the launch went on: " << out.err;
  EXPECT_NE(out.err.find("--secret-file"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("chmod 600"), std::string::npos) << out.err;
  EXPECT_EQ(out.err.find(kSecret), std::string::npos);
}

}  // namespace
