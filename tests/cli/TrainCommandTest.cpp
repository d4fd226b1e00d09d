// `dtrain train` end to end, through the real binary: two workers started by --nproc, the run
// folder they leave, an exact-position resume, identical numbers from two runs, a Fashion-MNIST
// subset, a worker killed mid-run and resumed, and config and data errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/CliTestUtil.h"
#include "dtrain/config/Environment.h"
#include "dtrain/launch/Launcher.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::Output;
using dtrain::testing::read_file;
using dtrain::testing::run;

class TrainCommand : public ::testing::Test {
 protected:
  fs::path write_config(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  std::string synthetic_config() const {
    return "name: e2e\n"
           "out_dir: " +
           (dir_ / "runs").string() +
           "\n"
           "nproc: 2\n"
           "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4, synthetic_size: "
           "512,\n"
           "       batch_size: 16, test_subset_size: 64}\n"
           "model: {name: mlp, hidden: [16]}\n"
           "optim: {name: sgd, lr: 0.1, momentum: 0.9}\n"
           "parallel: {strategy: data_parallel, backend: gloo, timeout_s: 60}\n"
           "train: {epochs: 2, log_every_steps: 4, checkpoint_every_epochs: 1, seed: 3}\n";
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(TrainCommand, TwoWorkersLeaveACompleteRunFolderAndResumeContinues) {
  const auto cfg = write_config("e2e.yaml", synthetic_config());
  const auto first = run("train " + cfg.string(), dir_.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto results = last_json_line(first.out);
  EXPECT_EQ(results["world_size"], 2);
  EXPECT_EQ(results["strategy"], "data_parallel");
  EXPECT_EQ(results["steps"], 2 * 512 / (16 * 2));
  EXPECT_EQ(results["final"]["samples"], 64);
  EXPECT_GT(results["comm"]["allreduce"]["calls"].get<int>(), 0);
  EXPECT_GT(results["samples_per_second"].get<double>(), 0.0);

  const fs::path run_dir = results["run_dir"].get<std::string>();
  for (const auto* f : {"config.yaml", "results.json", "metrics.jsonl", "metrics.csv", "model.pt",
                        "site_0/log.txt", "site_1/log.txt", "checkpoints/latest"}) {
    EXPECT_TRUE(fs::exists(run_dir / f)) << f;
  }
  bool has_events = false;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    has_events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(has_events);
  std::ifstream log1(run_dir / "site_1" / "log.txt");
  std::string line;
  std::getline(log1, line);
  EXPECT_EQ(line.rfind("[rank 1/2]", 0), 0u) << line;

  // One more epoch from the checkpoint: the step count continues, it does not restart.
  const auto second =
      run("train " + cfg.string() + " train.epochs=3 --resume " + run_dir.string(), dir_.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(last_json_line(second.out)["steps"], 3 * 512 / (16 * 2));

  // A checkpoint file works too, and the run continues in the same folder.
  std::string file;
  for (const auto& e : fs::directory_iterator(run_dir / "checkpoints")) {
    if (e.path().extension() == ".ckpt") file = std::max(file, e.path().string());
  }
  const auto third = run("train " + cfg.string() + " train.epochs=4 --resume " + file, dir_.path());
  ASSERT_EQ(third.exit_code, 0) << third.err;
  const auto resumed = last_json_line(third.out);
  EXPECT_EQ(resumed["steps"], 4 * 512 / (16 * 2));
  EXPECT_EQ(resumed["run_dir"], run_dir.string());
}

// parallel.backend left out: auto picks for two ranks on this host (mpi when the build has it and
// mpirun is in PATH: the launcher starts the workers through it; gloo otherwise), trains, and both
// rank logs say in one line which backend it chose and why.
TEST_F(TrainCommand, TwoWorkersWithoutABackendLogTheChoiceAndTrain) {
  std::string text = synthetic_config();
  text.replace(text.find("backend: gloo, "), 15, "");
  const auto cfg = write_config("auto.yaml", text + "");
  const auto result =
      run("train " + cfg.string() + " train.epochs=1 train.checkpoint_every_epochs=0", dir_.path());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const auto results = last_json_line(result.out);
  EXPECT_EQ(results["world_size"], 2);
  EXPECT_EQ(results["steps"], 512 / (16 * 2));
  const std::string expected =
      dtrain::launch::start_method_for("auto", 2, false, dtrain::config::process_environment());
  EXPECT_EQ(results["backend"], expected);
  const fs::path run_dir = results["run_dir"].get<std::string>();
  for (const auto* site : {"site_0", "site_1"}) {
    const std::string all = read_file(run_dir / site / "log.txt");
    const std::string line = "backend auto \u2192 " + expected + ": 2 ranks on one host";
    EXPECT_NE(all.find(line), std::string::npos) << site << ":\n" << all;
    if (expected == "mpi") {
      EXPECT_NE(all.find("shared memory"), std::string::npos) << all;
    }
  }
}

TEST_F(TrainCommand, TwoRunsOnTwoWorkersGiveIdenticalNumbers) {
  const auto cfg = write_config("e2e.yaml", synthetic_config());
  const auto a =
      run("train " + cfg.string() + " train.epochs=1 train.checkpoint_every_epochs=0", dir_.path());
  const auto b =
      run("train " + cfg.string() + " train.epochs=1 train.checkpoint_every_epochs=0", dir_.path());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto ra = last_json_line(a.out);
  const auto rb = last_json_line(b.out);
  EXPECT_NE(ra["run_dir"], rb["run_dir"]);
  for (const auto* key : {"final", "train_last_epoch", "initial_parameter_hash", "data_partition_hash"}) {
    EXPECT_EQ(ra[key], rb[key]) << key;  // every figure, bit for bit
  }
  EXPECT_EQ(ra["final"]["samples"], 64);
}

// metrics.jsonl's step records: the lines that carry train/loss.
std::vector<nlohmann::json> step_records(const fs::path& run_dir) {
  std::vector<nlohmann::json> records;
  std::ifstream lines(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(lines, line)) {
    auto record = nlohmann::json::parse(line);
    if (record.contains("train/loss")) records.push_back(record);
  }
  return records;
}

// train.precision end to end on two workers: bf16 and fp16 train and say so in results.json and the
// log; fp16's loss scale is a step metric and in results.json, and a resume carries on from it.
TEST_F(TrainCommand, MixedPrecisionRunsOnTwoWorkersAndFp16Resumes) {
  const auto cfg = write_config("e2e.yaml", synthetic_config());
  const auto bf16 = run("train " + cfg.string() + " train.epochs=1 train.precision=bf16", dir_.path());
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const auto rb = last_json_line(bf16.out);
  EXPECT_EQ(rb["precision"], "bf16");
  EXPECT_EQ(rb["config"]["train"]["precision"], "bf16");
  EXPECT_FALSE(rb.contains("loss_scale"));

  const auto fp16 = run("train " + cfg.string() + " train.epochs=1 train.precision=fp16", dir_.path());
  ASSERT_EQ(fp16.exit_code, 0) << fp16.err;
  const auto rf = last_json_line(fp16.out);
  EXPECT_EQ(rf["precision"], "fp16");
  const double scale = rf["loss_scale"].get<double>();
  EXPECT_EQ(scale, 65536.0 / std::pow(2.0, rf["skipped_steps"].get<double>()));
  const fs::path run_dir = rf["run_dir"].get<std::string>();
  const auto records = step_records(run_dir);
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back()["train/loss_scale"].get<double>(), scale);
  const std::string text = read_file(run_dir / "site_0" / "log.txt");
  EXPECT_NE(text.find("precision fp16"), std::string::npos);

  const auto resumed =
      run("train " + cfg.string() + " train.epochs=2 train.precision=fp16 --resume " + run_dir.string(),
          dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto rr = last_json_line(resumed.out);
  EXPECT_EQ(rr["steps"], 2 * 512 / (16 * 2));
  // No step of the second epoch overflowed again unless it says so: the scale went on from the saved one.
  EXPECT_EQ(rr["loss_scale"].get<double>(), scale / std::pow(2.0, rr["skipped_steps"].get<double>()));
}

// Checks the time split of results.json's step_time and of metrics.jsonl's step records, and
// returns results.json's bytes_per_step after checking that every step record logged the same.
double expect_step_time_and_bytes(const nlohmann::json& results) {
  const auto& t = results.at("step_time");
  for (const auto* phase : {"forward_s", "backward_s", "comm_s", "update_s"}) EXPECT_GE(t.at(phase), 0.0);
  EXPECT_GT(t.at("forward_s").get<double>(), 0.0);
  EXPECT_GT(t.at("backward_s").get<double>(), 0.0);
  const double phases = t.at("forward_s").get<double>() + t.at("backward_s").get<double>() +
                        t.at("comm_s").get<double>() + t.at("update_s").get<double>();
  EXPECT_LE(phases, results.at("train_seconds").get<double>() / results.at("steps").get<double>());
  const double bytes = results.at("bytes_per_step").get<double>();
  const auto records = step_records(results.at("run_dir").get<std::string>());
  EXPECT_FALSE(records.empty());
  for (const auto& r : records) {
    for (const auto* key : {"time/forward_s", "time/backward_s", "time/comm_s", "time/update_s"}) {
      EXPECT_GE(r.at(key).get<double>(), 0.0) << key;
    }
    EXPECT_LE(r.at("time/forward_s").get<double>() + r.at("time/backward_s").get<double>() +
                  r.at("time/comm_s").get<double>() + r.at("time/update_s").get<double>(),
              r.at("time/step_s").get<double>());
    EXPECT_EQ(r.at("comm/bytes_per_step").get<double>(), bytes) << "step " << r.at("step");
  }
  return bytes;
}

// Every strategy's steps leave their time split and bytes sent in metrics.jsonl and results.json.
// data_parallel on two workers: mlp [16] on 8x8 inputs with 4 classes has 1,108 parameters, one
// gradient bucket with the loss's 8 carried slots, 4,464 bytes, which Gloo's ring on 2 ranks sends
// whole from each rank. local on one process sends nothing. A run stopped within its first epoch
// reports no last epoch.
TEST_F(TrainCommand, MetricsAndResultsCarryTheStepTimeSplitAndBytesSent) {
  const auto cfg = write_config("e2e.yaml", synthetic_config());
  const auto dp =
      run("train " + cfg.string() + " train.max_steps=8 train.checkpoint_every_epochs=0", dir_.path());
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  const auto dp_results = last_json_line(dp.out);
  EXPECT_EQ(expect_step_time_and_bytes(dp_results), 4464.0);
  EXPECT_GT(dp_results["step_time"]["comm_s"].get<double>(), 0.0);
  // 8 steps of an epoch of 16: no epoch ended, so none is reported (not one of zeros).
  EXPECT_FALSE(dp_results.contains("train_last_epoch")) << dp_results.dump();

  auto text = synthetic_config();
  text.replace(text.find("nproc: 2"), 8, "nproc: 1");
  text.replace(text.find("data_parallel"), 13, "local");
  const auto local_cfg = write_config("local.yaml", text);
  const auto local =
      run("train " + local_cfg.string() + " train.max_steps=8 train.checkpoint_every_epochs=0", dir_.path());
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const auto local_results = last_json_line(local.out);
  EXPECT_EQ(expect_step_time_and_bytes(local_results), 0.0);
  EXPECT_EQ(local_results["step_time"]["comm_s"].get<double>(), 0.0);
}

TEST_F(TrainCommand, DataErrorIsOneMessageNamingTheFileOnStderrAndInTheRankLogs) {
  // Well-formed IDX files but one label out of range: every rank says so in one line (no C++
  // stack trace), and the reason is in the run folder's logs too.
  const auto data = dir_ / "idx";
  fs::create_directories(data);
  auto write_idx = [&](const std::string& name, std::vector<std::uint32_t> sizes,
                       std::vector<unsigned char> bytes) {
    std::string out{0, 0, 8, static_cast<char>(sizes.size())};
    for (const auto size : sizes) {
      for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((size >> shift) & 0xFF));
    }
    out.append(bytes.begin(), bytes.end());
    std::ofstream(data / name, std::ios::binary) << out;
  };
  for (const std::string split : {"train", "t10k"}) {
    write_idx(split + "-images-idx3-ubyte", {4, 28, 28}, std::vector<unsigned char>(4 * 28 * 28, 9));
    write_idx(split + "-labels-idx1-ubyte", {4},
              {1, 2, static_cast<unsigned char>(split == "train" ? 42 : 3), 4});
  }
  const auto cfg = write_config("e2e.yaml", synthetic_config());
  const auto out = run("train " + cfg.string() + " data.dataset=mnist data.root=" + data.string() +
                           " data.batch_size=1 ~model.hidden model.name=lenet5",
                       dir_.path());
  EXPECT_EQ(out.exit_code, 2) << out.err;  // a bad data file: a usage error (Note [Exit codes])
  const auto label_file = (data / "train-labels-idx1-ubyte").string();
  const auto reason = label_file + ": label out of range: sample 2 has label 42, expected 0..9";
  EXPECT_NE(out.err.find("error: " + reason), std::string::npos) << out.err;
  EXPECT_EQ(out.err.find("frame #"), std::string::npos) << out.err;
  EXPECT_EQ(out.err.find("Exception raised from"), std::string::npos) << out.err;
  // The first rank to fail stops the other, which may not have read the file yet: every rank that
  // did says so in its log and on stderr, naming itself.
  const std::string said[] = {"[rank 0/2] ", "[rank 1/2] dtrain: error: " + reason};
  int logs = 0, reported = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "runs")) {
    if (e.path().filename() != "log.txt") continue;
    ++logs;
    const std::string text = read_file(e.path());
    if (text.find(reason) == std::string::npos) continue;
    ++reported;
    const int rank = e.path().parent_path().filename() == "site_0" ? 0 : 1;
    if (rank == 0) {
      // Rank 0's logger line: "[rank 0/2] HH:MM:SS error: <reason>".
      std::istringstream lines(out.err);
      bool found = false;
      for (std::string line; std::getline(lines, line);) {
        found |= line.rfind(said[0], 0) == 0 && line.find("error: " + reason) != std::string::npos;
      }
      EXPECT_TRUE(found) << out.err;
    } else {
      EXPECT_NE(out.err.find(said[1]), std::string::npos) << out.err;
    }
  }
  EXPECT_EQ(logs, 2);  // site_0 and site_1
  EXPECT_GE(reported, 1);
}

// The pid of the launcher's child whose environment says RANK=<rank>; -1 if none.
pid_t worker_of(pid_t launcher, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    if (parent != launcher) continue;
    std::ifstream env_file(e.path() / "environ");
    for (std::string entry; std::getline(env_file, entry, '\0');) {
      if (entry == "RANK=" + std::to_string(rank)) return static_cast<pid_t>(std::stoi(name));
    }
  }
  return -1;
}

// Starts args[0] with args, stdout to /dev/null and stderr to `err_path`; -1 if it cannot start.
pid_t spawn_to_stderr_file(std::vector<std::string> args, const fs::path& err_path) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int failed = posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  return failed ? -1 : pid;
}

TEST_F(TrainCommand, WorkerKilledDuringTrainingStopsTheJobAndItsLastCheckpointResumes) {
  // Two workers with a checkpoint every 5 steps; once one is written, rank 1 gets SIGKILL. The job
  // must end at once with an error naming rank 1, and --resume must continue from the checkpoint.
  const auto cfg = write_config("e2e.yaml", synthetic_config());
  const auto err_path = dir_ / "killed.err";
  const std::string binary = DTRAIN_BINARY;
  std::vector<std::string> args{binary,
                                "train",
                                cfg.string(),
                                "train.epochs=100000",
                                "train.checkpoint_every_steps=5",
                                "train.checkpoint_every_epochs=0"};
  const pid_t launcher = spawn_to_stderr_file(args, err_path);
  ASSERT_GT(launcher, 0);

  // Wait for the first checkpoint to be reported (bounded: the job itself runs much longer).
  auto read_err = [&] { return read_file(err_path); };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::smatch found;
  const std::regex checkpoint_line("checkpoint (\\S+/checkpoint-\\d+\\.ckpt)");
  std::string err;
  while (!std::regex_search(err = read_err(), found, checkpoint_line) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(std::regex_search(err, found, checkpoint_line)) << err;
  const fs::path run_dir = fs::path(found[1].str()).parent_path().parent_path();
  const pid_t rank1 = worker_of(launcher, 1);
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(::kill(rank1, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  err = read_err();
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("SIGKILL"), std::string::npos) << err;

  // The latest checkpoint is whole: the run continues from it, 20 steps further.
  std::ifstream marker(run_dir / "checkpoints" / "latest");
  std::string latest;
  marker >> latest;
  std::smatch step_of;
  ASSERT_TRUE(std::regex_search(latest, step_of, std::regex("checkpoint-(\\d+)\\.ckpt"))) << latest;
  const long step = std::stol(step_of[1].str());
  EXPECT_GE(step, 5);
  EXPECT_EQ(step % 5, 0);
  const auto resumed =
      run("train " + cfg.string() + " train.epochs=100000 train.checkpoint_every_epochs=0 " +
              "train.max_steps=" + std::to_string(step + 20) + " --resume " + run_dir.string(),
          dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(last_json_line(resumed.out)["steps"], step + 20);
  EXPECT_NE(resumed.err.find("at step " + std::to_string(step)), std::string::npos) << resumed.err;
}

TEST_F(TrainCommand, FashionMnistSubsetTrainsLeNet) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const auto cfg = write_config("fm.yaml", "name: fm\nout_dir: " + (dir_ / "runs").string() +
                                               "\nnproc: 1\n"
                                               "data: {subset_size: 2048, test_subset_size: 1000}\n"
                                               "model: {name: lenet5}\n"
                                               "optim: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                                               "parallel: {strategy: local}\n"
                                               "train: {epochs: 1, log_every_steps: 10}\n");
  const auto out = run("train " + cfg.string(), dir_.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto results = last_json_line(out.out);
  EXPECT_EQ(results["model"], "lenet5");
  EXPECT_EQ(results["final"]["samples"], 1000);
  EXPECT_GT(results["final"]["top1"].get<double>(), 0.4);  // chance is 0.1
}

TEST_F(TrainCommand, ConfigErrorsNameFileLineAndKey) {
  const auto cfg = write_config("bad.yaml", "name: bad\noptim:\n  lr: fast\n");
  const auto out = run("train " + cfg.string(), dir_.path());
  EXPECT_NE(out.exit_code, 0);
  EXPECT_NE(out.err.find("bad.yaml:3"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("optim.lr"), std::string::npos) << out.err;

  const auto good = write_config("good.yaml", synthetic_config());
  const auto override_error = run("train " + good.string() + " parallel.strategy=warp", dir_.path());
  EXPECT_NE(override_error.exit_code, 0);
  EXPECT_NE(override_error.err.find("parallel.strategy"), std::string::npos) << override_error.err;
}

}  // namespace
