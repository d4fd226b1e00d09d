// Faults in a real `dtrain train` job of two workers, for each backend, and of eight on the 3-D
// mesh: a worker killed with SIGKILL mid-training stops every other process of the job within 10 s
// with a message naming its rank; with --max-restarts the job restarts from its last checkpoint and
// ends with the weights of an uninterrupted run, byte for byte.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli/CliTestUtil.h"
#include "dtrain/comm/Backend.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using dtrain::testing::last_json_line;
using dtrain::testing::run;
using dtrain::testing::spawn;

using dtrain::testing::read_file;

// /proc/<pid>/stat's state and parent; state 0 when the process is gone.
std::pair<char, pid_t> state_of(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return {0, 0};
  const auto close = line.rfind(')');
  if (close == std::string::npos) return {0, 0};
  std::istringstream rest(line.substr(close + 2));
  char state = 0;
  pid_t parent = 0;
  rest >> state >> parent;
  return {state, parent};
}

// Every process below `root` (mpirun's ranks are its grandchildren).
std::vector<pid_t> descendants_of(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (const auto [state, parent] = state_of(pid); state != 0) children.emplace(parent, pid);
  }
  std::vector<pid_t> found{root};
  for (std::size_t i = 0; i < found.size(); ++i) {
    const auto [begin, end] = children.equal_range(found[i]);
    for (auto it = begin; it != end; ++it) found.push_back(it->second);
  }
  found.erase(found.begin());
  return found;
}

// The worker of `rank` among `pids`: its environment says RANK (dtrain launch) or
// OMPI_COMM_WORLD_RANK (mpirun); -1 if none.
pid_t worker_of(const std::vector<pid_t>& pids, int rank) {
  for (const pid_t pid : pids) {
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    for (std::string entry; std::getline(env, entry, '\0');) {
      if (entry == "RANK=" + std::to_string(rank) || entry == "OMPI_COMM_WORLD_RANK=" + std::to_string(rank))
        return pid;
    }
  }
  return -1;
}

bool gone(pid_t pid) {
  const char state = state_of(pid).first;
  return state == 0 || state == 'Z';
}

// A `dtrain train` job of the configuration `config`, run in `dir`.
struct FaultJob {
  fs::path config;
  fs::path dir;

  // Starts the job, waits until it reports a checkpoint at step `at_least` or later, and returns
  // the job's process and that checkpoint's path.
  std::pair<pid_t, fs::path> start_until_checkpoint(std::vector<std::string> extra, long at_least) const {
    std::vector<std::string> args{DTRAIN_BINARY, "train", config.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    const pid_t job = spawn(args, dir / "job.out", dir / "job.err");
    EXPECT_GT(job, 0);
    const std::regex checkpoint_line("checkpoint (\\S+/checkpoint-(\\d+)\\.ckpt)");
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline) {
      const std::string err = read_file(dir / "job.err");
      for (std::sregex_iterator it(err.begin(), err.end(), checkpoint_line), end; it != end; ++it) {
        if (std::stol((*it)[2].str()) >= at_least) return {job, fs::path((*it)[1].str())};
      }
      if (state_of(job).first == 'Z') break;  // ended before that checkpoint
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "no checkpoint at step " << at_least << " or later:\n" << read_file(dir / "job.err");
    return {job, {}};
  }

  // SIGKILL of `rank` after the first checkpoint stops every process of the job within 10 s, and
  // the job's error names the rank.
  void expect_kill_stops_the_job(int rank, const std::string& label) const {
    const auto [job, checkpoint] = start_until_checkpoint({}, 8);
    ASSERT_FALSE(checkpoint.empty());
    const auto processes = descendants_of(job);
    const pid_t victim = worker_of(processes, rank);
    ASSERT_GT(victim, 0) << "no worker of rank " << rank << " among " << processes.size() << " processes";

    const auto killed = Clock::now();
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(job, &status, 0), job);
    const double job_exit = std::chrono::duration<double>(Clock::now() - killed).count();
    while (!std::all_of(processes.begin(), processes.end(), gone) &&
           Clock::now() < killed + std::chrono::seconds(30)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const double last_gone = std::chrono::duration<double>(Clock::now() - killed).count();
    std::printf("%s: kill -9 of rank %d -> job exit %.3f s, last process gone %.3f s\n", label.c_str(), rank,
                job_exit, last_gone);
    EXPECT_TRUE(std::all_of(processes.begin(), processes.end(), gone));
    EXPECT_LT(last_gone, 10.0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 0);
    const auto err = read_file(dir / "job.err");
    EXPECT_NE(err.find("rank " + std::to_string(rank)), std::string::npos) << err;
  }

  // With --max-restarts 1, `rank` killed after the checkpoint of step `at_least` (mid-epoch: the
  // restart must bring back the sampler's position, not only the weights): the job restarts from
  // that checkpoint and ends with an uninterrupted run's model.pt, byte for byte, after `steps`.
  void expect_restart_ends_uninterrupted(
      int rank, long at_least, long steps, const std::string& label,
      double learned_below = std::numeric_limits<double>::infinity()) const {
    const auto uninterrupted = run("train " + config.string(), dir);
    ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.err;
    const fs::path reference = last_json_line(uninterrupted.out)["run_dir"].get<std::string>();

    const auto [job, checkpoint] = start_until_checkpoint({"--max-restarts", "1"}, at_least);
    ASSERT_FALSE(checkpoint.empty());
    const pid_t victim = worker_of(descendants_of(job), rank);
    ASSERT_GT(victim, 0);
    ASSERT_EQ(::kill(victim, SIGKILL), 0) << "the job ended before the kill: make it longer";
    int status = 0;
    ASSERT_EQ(::waitpid(job, &status, 0), job);
    const auto err = read_file(dir / "job.err");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
    EXPECT_NE(err.find("restarting all workers (restart 1 of 1)"), std::string::npos) << err;
    std::smatch resumed;
    ASSERT_TRUE(std::regex_search(err, resumed, std::regex("resumed from \\S+ at step (\\d+)"))) << err;
    EXPECT_GE(std::stol(resumed[1].str()), at_least);
    EXPECT_LT(std::stol(resumed[1].str()), steps) << "nothing was left to train after the restart";

    const fs::path restarted = checkpoint.parent_path().parent_path();
    const auto results = last_json_line(read_file(dir / "job.out"));
    EXPECT_EQ(results["steps"], steps);
    EXPECT_EQ(results["final"], last_json_line(uninterrupted.out)["final"]);
    EXPECT_LT(results["final"]["loss"].get<double>(), learned_below) << "the run did not learn";
    const auto a = read_file(reference / "model.pt");
    const auto b = read_file(restarted / "model.pt");
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "the restarted run's model.pt differs from the uninterrupted run's";
    std::printf(
        "%s: killed rank %d after the checkpoint of step %ld, 1 restart from step %s, model.pt %s (%zu "
        "bytes)\n",
        label.c_str(), rank, std::stol(checkpoint.stem().string().substr(11)), resumed[1].str().c_str(),
        a == b ? "bit-equal" : "DIFFERENT", b.size());
  }
};

class Faults : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto backends = dtrain::comm::available_backends();
    if (std::find(backends.begin(), backends.end(), GetParam()) == backends.end())
      GTEST_SKIP() << "this build has no " << GetParam() << " backend";
    if (GetParam() == "mpi" && ::access("/usr/bin/mpirun", X_OK) != 0)
      GTEST_SKIP() << "openmpi-bin is not installed";
    // 16 steps an epoch; 20 epochs, 320 steps, leave time to kill a worker after a checkpoint.
    std::ofstream(job_.config)
        << "name: faults\n"
           "out_dir: "
        << (dir_ / "runs").string()
        << "\n"
           "nproc: 2\n"
           "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, "
           "synthetic_size: 512, batch_size: 16, test_subset_size: 64}\n"
           "model: {name: mlp, hidden: [16]}\n"
           "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
           "parallel: {strategy: data_parallel, backend: "
        << GetParam()
        << ", timeout_s: 60}\n"
           "train: {epochs: 20, log_every_steps: 8, checkpoint_every_steps: 8, "
           "checkpoint_every_epochs: 0, seed: 5}\n";
  }

  dtrain::testing::ScratchDir dir_;
  FaultJob job_{dir_ / "faults.yaml", dir_.path()};
};

TEST_P(Faults, KilledRankStopsEveryProcessWithinTenSecondsNamingIt) {
  job_.expect_kill_stops_the_job(1, GetParam() + ", one host");
}

TEST_P(Faults, RestartAfterAKillEndsWithTheWeightsOfAnUninterruptedRun) {
  job_.expect_restart_ends_uninterrupted(1, 24, 320, GetParam());
}

// The same on eight workers of the 3-D mesh (2 pipeline stages x 2 shards x 2 tensor-parallel
// ranks): rank 5, a second stage's rank, killed.
class MeshFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    // 16 steps an epoch of 8 workers x 4 samples; 80 steps.
    std::ofstream(job_.config)
        << "name: mesh-faults\nout_dir: " << (dir_ / "runs").string()
        << "\nnproc: 8\n"
           "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: "
           "512, "
           "batch_size: 4, test_subset_size: 32}\n"
           "model: {name: vit, dim: 16, heads: 2, depth: 2, patch: 4}\n"
           "optim: {name: adam, lr: 0.001}\n"
           "parallel: {strategy: pipeline, backend: gloo, timeout_s: 60, mesh: {pp: 2, dp_shard: 2, tp: 2}, "
           "pipeline: {micro_batches: 2}}\n"
           "train: {epochs: 5, log_every_steps: 8, checkpoint_every_steps: 8, checkpoint_every_epochs: 0, "
           "eval_every_epochs: 0, threads: 1, seed: 5}\n";
  }

  dtrain::testing::ScratchDir dir_;
  FaultJob job_{dir_ / "mesh.yaml", dir_.path()};
};

TEST_F(MeshFaults, KilledRankStopsTheJobNamingIt) {
  job_.expect_kill_stops_the_job(5, "pp 2 x dp_shard 2 x tp 2");
}

TEST_F(MeshFaults, RestartAfterAKillEndsWithTheWeightsOfAnUninterruptedRun) {
  // Below chance (ln 4 for four classes): equal weights from weights that never moved prove nothing.
  job_.expect_restart_ends_uninterrupted(5, 24, 80, "pp 2 x dp_shard 2 x tp 2", std::log(4.0));
}

// A worker under a launcher does not restart itself: the flag would be ignored, so it is refused.
TEST(FaultFlags, MaxRestartsInAWorkerStartedByALauncherIsRefused) {
  const dtrain::testing::ScratchDir dir;
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  const auto out = run("train --max-restarts 1 train.max_steps=1", dir.path());
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("--max-restarts 1: this process is a worker started by a launcher"),
            std::string::npos)
      << out.err;
}

// A run removes at its start what a writer killed mid-write left in its run folder.
TEST(FaultFlags, StartRemovesStaleTemporariesOfItsRunFolder) {
  const dtrain::testing::ScratchDir dir;
  fs::create_directories(dir / "run" / "checkpoints");
  const pid_t writer = ::fork();
  if (writer == 0) ::_exit(0);
  ASSERT_GT(writer, 0);
  ASSERT_EQ(::waitpid(writer, nullptr, 0), writer);  // an exited writer's pid
  const std::string suffix = ".tmp." + std::to_string(writer) + ".0";
  const auto stale_checkpoint = dir / "run" / "checkpoints" / (".checkpoint-000000000004.ckpt" + suffix);
  const auto stale_results = dir / "run" / (".results.json" + suffix);
  std::ofstream(stale_checkpoint) << "partial";
  std::ofstream(stale_results) << "partial";
  const auto out =
      run("train nproc=1 parallel.strategy=local data.dataset=synthetic data.synthetic_size=64 "
          "data.batch_size=16 model.name=mlp train.max_steps=2 --run-dir " +
              (dir / "run").string(),
          dir.path());
  EXPECT_EQ(out.exit_code, 0) << out.err;
  EXPECT_FALSE(fs::exists(stale_checkpoint));
  EXPECT_FALSE(fs::exists(stale_results));
  EXPECT_NE(out.err.find("removed " + stale_checkpoint.string() + ", left by an interrupted write"),
            std::string::npos)
      << out.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, Faults, ::testing::Values("gloo", "mpi"),
                         [](const auto& info) { return info.param; });

}  // namespace
