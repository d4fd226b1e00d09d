// launch_on_hosts and stop_on_hosts with real processes, through an ssh stand-in that runs the
// remote command here (the real ssh and sshd are in tests/ssh/): every host's output streamed
// with its name, a failed host stopping the others, an unreachable host named, and a job stopped
// from elsewhere by its id leaving no launcher behind.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dtrain/launch/HostLaunch.h"
#include "dtrain/util/Clock.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

extern char** environ;

namespace dtrain::launch {
namespace {

namespace fs = std::filesystem;
using util::Clock;

// ssh for tests: skips the options up to "--", then runs the command here; a host whose name begins
// with "unreachable" fails as ssh does for an unknown host.
constexpr const char* kFakeSsh = R"(#!/bin/sh
while [ "$1" != "--" ]; do shift; done
shift
host=$1
shift
case $host in unreachable*)
  echo "ssh: Could not resolve hostname $host: Name or service not known" >&2
  exit 255 ;;
esac
export FAKE_SSH_HOST=$host
exec sh -c "$1"
)";

// dtrain for tests: reads the node flags, says where it runs on stdout and stderr, then exits 3 on
// node $DTRAIN_TEST_FAIL_NODE (once node 0 has recorded its pid), runs until stopped when the worker command
// is "wait", else exits 0.
constexpr const char* kFakeDtrain = R"(#!/bin/sh
node=
while [ $# -gt 0 ]; do
  case $1 in --node-rank) node=$2 ;; --) shift; break ;; esac
  shift
done
echo "node $node on $FAKE_SSH_HOST runs $*"
echo "node $node writes to stderr" >&2
if [ "$node" = "$DTRAIN_TEST_FAIL_NODE" ]; then
  # fails once node 0 runs, so that there is a launcher to stop
  while [ ! -s "$HOME/.dtrain/jobs/test-job/node0.pid" ]; do sleep 0.01; done
  exit 3
fi
if [ "$1" = wait ]; then
  trap 'kill $child; exit 143' TERM
  sleep 60 &
  child=$!
  wait $child
fi
exit 0
)";

comm::Environment this_environment() {
  comm::Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

class HostLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "home");
    write_script("ssh", kFakeSsh);
    write_script("dtrain", kFakeDtrain);
    options_.hosts = parse_host_list("h0:2,h1:2");
    options_.ssh = (dir_ / "ssh").string();
    options_.ssh_options = {"-o", "StrictHostKeyChecking=no"};
    options_.job_id = "test-job";
    options_.remote_dtrain = (dir_ / "dtrain").string();
    options_.working_directory = dir_.string();
    options_.command = {"worker", "arg one"};
    options_.environment = this_environment();
    options_.environment["HOME"] = (dir_ / "home").string();
    options_.environment.erase("DTRAIN_TEST_FAIL_NODE");
    options_.stop_grace = std::chrono::seconds(1);
    options_.output_fd = ::open((dir_ / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    options_.diagnostics_fd = ::open((dir_ / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  void TearDown() override {
    ::close(options_.output_fd);
    ::close(options_.diagnostics_fd);
  }
  void write_script(const std::string& name, const char* text) {
    std::ofstream(dir_ / name) << text;
    fs::permissions(dir_ / name, fs::perms::owner_all);
  }
  std::string read(const std::string& name) const { return dtrain::testing::read_file(dir_ / name); }
  fs::path pid_file(int node) const {
    return dir_ / "home/.dtrain/jobs/test-job" / ("node" + std::to_string(node) + ".pid");
  }

  dtrain::testing::ScratchDir dir_;
  HostLaunchOptions options_;
};

TEST_F(HostLaunchTest, RunsTheLauncherOnEveryHostAndPrefixesItsOutput) {
  EXPECT_EQ(launch_on_hosts(options_), 0);
  const std::string out = read("out"), err = read("err");
  EXPECT_NE(out.find("[h0] node 0 on h0 runs worker arg one\n"), std::string::npos) << out;
  EXPECT_NE(out.find("[h1] node 1 on h1 runs worker arg one\n"), std::string::npos) << out;
  EXPECT_NE(err.find("[h1] node 1 writes to stderr\n"), std::string::npos) << err;
  EXPECT_NE(err.find("job test-job finished on every host"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(pid_file(0)));
  EXPECT_FALSE(fs::exists(pid_file(1)));
}

TEST_F(HostLaunchTest, AFailedHostStopsTheOthers) {
  options_.command = {"wait"};
  options_.environment["DTRAIN_TEST_FAIL_NODE"] = "1";
  const auto start = Clock::now();
  EXPECT_EQ(launch_on_hosts(options_), 3);
  EXPECT_LT(util::seconds_since(start), 20.0);  // node 0 would wait 60 s
  const std::string err = read("err");
  EXPECT_NE(err.find("host 'h1' (node 1) failed with exit code 3: the job failed there"), std::string::npos)
      << err;
  // The stop's own report, on stdout.
  EXPECT_NE(read("out").find("[h0] job test-job: stopped its launcher"), std::string::npos) << read("out");
  EXPECT_FALSE(fs::exists(pid_file(0)));
}

TEST_F(HostLaunchTest, AnUnreachableHostIsNamed) {
  options_.hosts = parse_host_list("h0,unreachable-host");
  options_.command = {"wait"};
  const auto start = Clock::now();
  EXPECT_EQ(launch_on_hosts(options_), 255);
  EXPECT_LT(util::seconds_since(start), 20.0);  // node 0 would wait 60 s
  const std::string err = read("err");
  EXPECT_NE(
      err.find("host 'unreachable-host' (node 1): ssh failed (exit 255): ssh: Could not resolve hostname "
               "unreachable-host"),
      std::string::npos)
      << err;
  // ssh never reached it: no second ssh to stop a job there.
  EXPECT_EQ(err.find("could not stop the job there"), std::string::npos) << err;
}

TEST_F(HostLaunchTest, ASignalStopsEveryHost) {
  options_.command = {"wait"};
  int result = -1;
  std::thread job([&] { result = launch_on_hosts(options_); });
  // The launch has installed its signal handlers before it started any host.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!(fs::exists(pid_file(0)) && fs::exists(pid_file(1))) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(pid_file(0)) && fs::exists(pid_file(1)));
  ::kill(::getpid(), SIGTERM);
  job.join();
  EXPECT_EQ(result, 128 + SIGTERM);
  EXPECT_FALSE(fs::exists(pid_file(0)));
  EXPECT_FALSE(fs::exists(pid_file(1)));
  const std::string out = read("out");
  EXPECT_NE(out.find("[h0] job test-job: stopped its launcher"), std::string::npos) << out;
  EXPECT_NE(out.find("[h1] job test-job: stopped its launcher"), std::string::npos) << out;
  EXPECT_NE(read("err").find("SIGTERM; stopping job test-job on every host"), std::string::npos)
      << read("err");
}

TEST_F(HostLaunchTest, StopByJobIdEndsEveryLauncher) {
  options_.command = {"wait"};
  int result = -1;
  std::thread job([&] { result = launch_on_hosts(options_); });
  // Both launchers have recorded their pids once they run.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!(fs::exists(pid_file(0)) && fs::exists(pid_file(1))) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(pid_file(1)));
  std::string pid1;
  while (pid1.empty() && Clock::now() < deadline) pid1 = read("home/.dtrain/jobs/test-job/node1.pid");
  HostLaunchOptions stop = options_;
  EXPECT_EQ(stop_on_hosts(stop), 0);
  job.join();
  EXPECT_NE(result, 0);
  EXPECT_FALSE(fs::exists(pid_file(0)));
  EXPECT_FALSE(fs::exists(pid_file(1)));
  EXPECT_NE(::kill(std::stoi(pid1), 0), 0) << "node 1's launcher (pid " << pid1 << ") still runs";
  EXPECT_NE(read("out").find("[h1] job test-job: stopped its launcher"), std::string::npos) << read("out");
}

}  // namespace
}  // namespace dtrain::launch
