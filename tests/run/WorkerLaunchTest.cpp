// WorkerLaunch: the launcher's options and the worker command line that dtrain train, dtrain
// experiment and dtrain bench throughput share, taken from the run's configuration.
#include "dtrain/run/WorkerLaunch.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"

namespace dtrain::run {
namespace {

using Command = std::vector<std::string>;

TEST(WorkerLaunch, TrainCommandCarriesConfigOverridesRunFolderAndResume) {
  EXPECT_EQ(train_command("/bin/dtrain", "base.yaml", {"optim.lr=0.1", "nproc=2"}, "runs/a"),
            (Command{"/bin/dtrain", "train", "base.yaml", "optim.lr=0.1", "nproc=2", "--run-dir", "runs/a"}));
  // Without a file (the dAD paper's defaults, DiNNO's form) the overrides come first.
  EXPECT_EQ(train_command("dtrain", "", {"model.name=mlp"}, "runs/b", "runs/b"),
            (Command{"dtrain", "train", "model.name=mlp", "--run-dir", "runs/b", "--resume", "runs/b"}));
}

TEST(WorkerLaunch, LauncherOptionsComeFromTheRunsConfiguration) {
  const auto cfg = config::parse_run_config(
      "", "test", {"parallel.backend=gloo", "parallel.timeout_s=12.5", "train.threads=3", "nproc=2"});
  const comm::Environment environment{{"PATH", "/usr/bin"}};
  const auto options = worker_launch(cfg, 4, "runs/x", environment);
  EXPECT_EQ(options.nproc_per_node, 4);
  EXPECT_EQ(options.backend, "gloo");
  EXPECT_EQ(options.threads, 3);
  EXPECT_EQ(options.log_dir, "runs/x/launch");
  EXPECT_EQ(options.rendezvous_timeout, std::chrono::milliseconds(12500));
  EXPECT_EQ(rendezvous_timeout(cfg), std::chrono::milliseconds(12500));
  EXPECT_EQ(options.environment, environment);
  // What each caller decides for itself is left at the launcher's defaults.
  const launch::LaunchOptions defaults;
  EXPECT_EQ(options.max_restarts, defaults.max_restarts);
  EXPECT_EQ(options.oversubscribe, defaults.oversubscribe);
  EXPECT_EQ(options.output_fd, defaults.output_fd);
  EXPECT_TRUE(options.command.empty());
}

TEST(WorkerLaunch, OneRankOfAStrategyWithoutCollectivesConnectsNothing) {
  const auto cfg = config::parse_run_config("", "test", {"parallel.strategy=local"});
  comm::RendezvousInfo alone;
  EXPECT_EQ(connect_worker(cfg, alone), nullptr);
}

}  // namespace
}  // namespace dtrain::run
