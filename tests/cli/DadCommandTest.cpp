// The dAD paper's command line end to end, through the real binary: the two-site command as two
// processes on 127.0.0.1 (a tiny MNIST written here, since dtrain downloads nothing), the run
// folder <log-dir>/<name>/ with site_0 and site_1, a rerun refused and a --resume continuing, the
// same without CONFIG on workers started by --nproc, and the one-line errors for names dtrain does
// not know and for flags it cannot honour.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/cuda.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/CliTestUtil.h"
#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::read_file;

// A port nobody listens on now: the kernel's pick for a socket bound to port 0.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One `dtrain` process, its stdout and stderr in files.
class Process {
 public:
  Process(std::vector<std::string> args, const fs::path& out, const fs::path& err) : err_(err) {
    args.insert(args.begin(), DTRAIN_BINARY);
    pid_ = dtrain::testing::spawn(std::move(args), out, err);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (pid_ > 0) wait();
  }

  // The exit code (128 + signal when killed); blocks until the process ends.
  int wait() {
    if (pid_ <= 0) return -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string err() const { return read_file(err_); }

 private:
  pid_t pid_ = -1;
  fs::path err_;
};

struct Finished {
  int code;
  std::string err;
};

class DadCommand : public ::testing::Test {
 protected:
  // The dAD paper's two-site command, both sites on this host: `extra` after the seed's own flags.
  std::vector<Finished> two_sites(const std::vector<std::string>& extra) {
    const std::string port = std::to_string(free_port());
    std::vector<std::unique_ptr<Process>> sites;
    for (const std::string rank : {"0", "1"}) {
      std::vector<std::string> args{"train",
                                    "--name",
                                    "rankdad_mnist",
                                    "--rank",
                                    rank,
                                    "--dist-url",
                                    "tcp://127.0.0.1:" + port,
                                    "--master-port",
                                    port,
                                    "--master-addr",
                                    "127.0.0.1",
                                    "--num-nodes",
                                    "2",
                                    "--distributed-mode",
                                    "rankdad",
                                    "--model",
                                    "MNISTNet",
                                    "--dataset",
                                    "MNIST"};
      args.insert(args.end(), extra.begin(), extra.end());
      sites.push_back(
          std::make_unique<Process>(args, dir_ / ("site" + rank + ".out"), dir_ / ("site" + rank + ".err")));
    }
    std::vector<Finished> out;
    for (auto& site : sites) {
      const int code = site->wait();
      out.push_back({code, site->err()});
    }
    return out;
  }

  Finished run(const std::vector<std::string>& args) {
    Process p(args, dir_ / "out.txt", dir_ / "err.txt");
    const int code = p.wait();
    return {code, p.err()};
  }

  // An MNIST folder of IDX files (raw, as the seed's download leaves them after unpacking): `train`
  // and `test` 28x28 images of pixels (i * 7 + row) % 256 and labels i % 10.
  fs::path write_mnist(std::uint32_t train, std::uint32_t test) {
    const auto root = dir_ / "mnist";
    fs::create_directories(root);
    auto idx = [&](const std::string& name, std::vector<std::uint32_t> sizes, const std::vector<char>& data) {
      std::string bytes{0, 0, 8, static_cast<char>(sizes.size())};
      for (const auto size : sizes) {
        for (int shift = 24; shift >= 0; shift -= 8)
          bytes.push_back(static_cast<char>((size >> shift) & 0xFF));
      }
      bytes.append(data.begin(), data.end());
      std::ofstream(root / name, std::ios::binary) << bytes;
    };
    for (const auto& [split, n] : {std::pair<std::string, std::uint32_t>{"train", train}, {"t10k", test}}) {
      std::vector<char> pixels, labels;
      for (std::uint32_t i = 0; i < n; ++i) {
        for (int p = 0; p < 28 * 28; ++p) pixels.push_back(static_cast<char>((i * 7 + p / 28) % 256));
        labels.push_back(static_cast<char>(i % 10));
      }
      idx(split + "-images-idx3-ubyte", {n, 28, 28}, pixels);
      idx(split + "-labels-idx1-ubyte", {n}, labels);
    }
    return root;
  }

  dtrain::testing::ScratchDir dir_;
};

// "dtrain: error: <one line>\n", with no C++ stack trace.
void expect_one_line_error(const Finished& f, const std::string& starts) {
  EXPECT_NE(f.code, 0);
  EXPECT_EQ(f.err.rfind("dtrain: error: " + starts, 0), 0u) << f.err;
  EXPECT_EQ(f.err.find('\n'), f.err.size() - 1) << f.err;
  EXPECT_EQ(f.err.find("frame #"), std::string::npos) << f.err;
}

TEST_F(DadCommand, TwoSitesWriteLogDirNameSiteFoldersAndARerunNeedsResume) {
  const auto mnist = write_mnist(512, 64);
  const auto logs = dir_ / "logs";
  const std::vector<std::string> extra{"--log-dir",
                                       logs.string(),
                                       "--N",
                                       "256",
                                       "--batch-size",
                                       "32",
                                       "data.root=" + mnist.string(),
                                       "parallel.timeout_s=60"};
  const auto first = two_sites(extra);
  ASSERT_EQ(first[0].code, 0) << first[0].err;
  ASSERT_EQ(first[1].code, 0) << first[1].err;

  const auto run = logs / "rankdad_mnist";
  EXPECT_EQ(std::distance(fs::directory_iterator(logs), fs::directory_iterator{}), 1);  // no dated folder
  for (const char* rank : {"0", "1"}) {
    const auto log = read_file(run / ("site_" + std::string(rank)) / "log.txt");
    EXPECT_EQ(log.rfind("[rank " + std::string(rank) + "/2]", 0), 0u) << log;
  }
  // Every flag landed on its key, and config.yaml loads back as the run's configuration.
  const auto cfg = dtrain::config::load_run_config((run / "config.yaml").string());
  EXPECT_EQ(cfg.name, "rankdad_mnist");
  EXPECT_EQ(cfg.out_dir, logs.string());
  EXPECT_EQ(cfg.run_folder, dtrain::config::RunFolder::Named);
  EXPECT_EQ(cfg.parallel.strategy, "rankdad");
  EXPECT_EQ(cfg.model.name, "mnistnet");
  EXPECT_EQ(cfg.data.dataset, "mnist");
  EXPECT_EQ(cfg.data.subset_size, 256);
  EXPECT_EQ(cfg.data.batch_size, 32);
  const auto results = nlohmann::json::parse(read_file(run / "results.json"));
  EXPECT_EQ(results["world_size"], 2);
  EXPECT_EQ(results["strategy"], "rankdad");
  EXPECT_EQ(results["steps"], 256 / (32 * 2));  // --N samples over two sites of --batch-size
  EXPECT_EQ(results["final"]["samples"], 64);

  // The same command again would mix a second run into the folder: both sites refuse.
  const auto again = two_sites(extra);
  expect_one_line_error(again[0], "run folder " + run.string() + " holds an earlier run");
  EXPECT_NE(again[0].err.find("--resume " + run.string()), std::string::npos) << again[0].err;
  expect_one_line_error(again[1],
                        "[rank 1/2] rank 0 could not create the run folder: run folder " + run.string());
  EXPECT_EQ(nlohmann::json::parse(read_file(run / "results.json"))["steps"], 4);

  // With --resume it continues that run, in that folder.
  auto resumed_args = extra;
  resumed_args.insert(resumed_args.end(), {"--epochs", "2", "--resume", run.string()});
  const auto resumed = two_sites(resumed_args);
  ASSERT_EQ(resumed[0].code, 0) << resumed[0].err;
  ASSERT_EQ(resumed[1].code, 0) << resumed[1].err;
  const auto continued = nlohmann::json::parse(read_file(run / "results.json"));
  EXPECT_EQ(continued["steps"], 2 * 4);
  EXPECT_EQ(continued["run_dir"], run.string());
}

TEST_F(DadCommand, WithoutConfigNprocWorkersShareLogDirNameAndAResumeContinues) {
  const auto logs = dir_ / "logs";
  const std::vector<std::string> args{"train",
                                      "--nproc",
                                      "2",
                                      "--name",
                                      "local_pair",
                                      "--log-dir",
                                      logs.string(),
                                      "--distributed-mode",
                                      "DSGD",
                                      "--dataset",
                                      "Synthetic",
                                      "--model",
                                      "MLP",
                                      "--model-kwargs",
                                      "{'hidden': [16]}",
                                      "--batch-size",
                                      "16",
                                      "--lr",
                                      "0.05",
                                      "data.synthetic_shape=[1,8,8]",
                                      "data.synthetic_size=256",
                                      "parallel.timeout_s=60"};
  const auto first = run(args);
  ASSERT_EQ(first.code, 0) << first.err;
  const auto folder = logs / "local_pair";
  EXPECT_TRUE(fs::exists(folder / "site_0" / "log.txt"));
  EXPECT_TRUE(fs::exists(folder / "site_1" / "log.txt"));
  const auto cfg = dtrain::config::load_run_config((folder / "config.yaml").string());
  EXPECT_EQ(cfg.model.hidden, (std::vector<int>{16}));
  EXPECT_DOUBLE_EQ(cfg.optim.lr, 0.05);
  EXPECT_EQ(nlohmann::json::parse(read_file(folder / "results.json"))["steps"], 256 / (16 * 2));

  expect_one_line_error(run(args), "run folder " + folder.string() + " holds an earlier run");

  auto resume = args;
  resume.insert(resume.end(), {"--epochs", "2", "--resume", folder.string()});
  const auto resumed = run(resume);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(folder / "results.json"))["steps"], 2 * 256 / (16 * 2));
}

TEST_F(DadCommand, UnknownModeOrModelIsOneLineNamingTheAcceptedValues) {
  using dtrain::config::registered_choices;
  const auto mode = run({"train", "--name", "x", "--log-dir", (dir_ / "logs").string(), "--distributed-mode",
                         "warp", "--model", "MNISTNet", "--dataset", "MNIST"});
  expect_one_line_error(mode, "--distributed-mode warp: parallel.strategy: expected one of " +
                                  registered_choices(dtrain::config::kStrategyKey).list() +
                                  "; found \"warp\"");
  const auto model = run({"train", "--log-dir", (dir_ / "logs").string(), "--model", "MNISTNets"});
  expect_one_line_error(model, "--model MNISTNets: model.name: expected one of " +
                                   registered_choices(dtrain::config::kModelKey).list() +
                                   "; found \"MNISTNets\"");
  EXPECT_NE(model.err.find("did you mean mnistnet?"), std::string::npos) << model.err;
  EXPECT_FALSE(fs::exists(dir_ / "logs"));  // refused before any folder was made
}

TEST_F(DadCommand, CommandLineMistakesAreOneLineNamingWhatWasWrong) {
  expect_one_line_error(
      run({"trian", "--lr", "0.1"}),
      "unknown command 'trian'; the commands are info, launch, bench, train, experiment, report");
  expect_one_line_error(run({"train", "--nproc", "0"}), "--nproc: must be at least 1, found 0");
  expect_one_line_error(run({"train", "--rank", "-1"}), "--rank: must be at least 0, found -1");
  expect_one_line_error(run({"train", "--nproc", "two"}), "--nproc: expected a whole number, found two");
  expect_one_line_error(run({"train", "--no-such-flag"}),
                        "unknown option --no-such-flag (dtrain train --help lists the options)");
  if (!torch::cuda::is_available()) {  // with a GPU, train.device=cuda is no mistake
    expect_one_line_error(run({"train", "train.device=cuda"}), "train.device: cuda: ");
  }
  const auto help = run({"train", "--help"});
  EXPECT_EQ(help.code, 0);
}

TEST_F(DadCommand, FlagsDtrainCannotHonourAreErrorsSayingWhy) {
  const auto args = run({"train", "--model-args", "[784, 10]"});
  expect_one_line_error(
      args, "--model-args [784, 10]: dtrain's models take named options, not positional arguments");
  expect_one_line_error(run({"train", "--N", "0"}), "--N 0: expected a positive number of training samples");
  // Without CONFIG a key=value comes first, and is an override like any other.
  expect_one_line_error(run({"train", "optim.lr=fast"}),
                        "override \"optim.lr=fast\": optim.lr: expected a positive number");
  expect_one_line_error(run({"train", "missing.yaml"}), "missing.yaml: cannot open the configuration file");
}

}  // namespace
