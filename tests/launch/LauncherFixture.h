// The fixture of the launcher's tests with real processes (LauncherTest.cpp, ThreadsPerWorkerTest.cpp):
// a scratch directory with files standing in for the launcher's stdout and stderr, node 1 of a
// two-node job in its own process, and a free port.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "dtrain/comm/Backend.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/util/Clock.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

extern char** environ;

namespace dtrain::launch {

using comm::Environment;
using util::Clock;
using util::seconds_since;

using dtrain::testing::read_file;

inline Environment current_environment() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string kv(*entry);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

inline std::map<std::string, std::string> parse_env_dump(const std::string& text) {
  std::map<std::string, std::string> vars;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

// A scratch directory, with files standing in for the launcher's stdout and stderr.
class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_fd_ = ::open((dir_ / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    err_fd_ = ::open((dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(out_fd_, 0);
    ASSERT_GE(err_fd_, 0);
  }
  void TearDown() override {
    ::close(out_fd_);
    ::close(err_fd_);
  }

  LaunchOptions options(int nproc, const std::string& script) const {
    LaunchOptions o;
    o.nproc_per_node = nproc;
    o.command = {"/bin/sh", "-c", script};
    o.environment = current_environment();
    o.environment["TEST_DIR"] = dir_.string();
    o.log_dir = (dir_ / "logs").string();
    o.stop_grace = std::chrono::milliseconds(2000);
    o.output_fd = out_fd_;
    o.diagnostics_fd = err_fd_;
    return o;
  }

  std::string launcher_stdout() const { return read_file(dir_ / "stdout"); }
  std::string launcher_stderr() const { return read_file(dir_ / "stderr"); }

  // Node 1 of `o`'s two-node job (the same script, logs in node1-logs/, output in node1.out), started
  // on a thread once node 0's launcher hosts the store; its wait status lands in `status`. `prefix`
  // goes before its command line (e.g. "env -u VAR ").
  std::thread start_node1(const LaunchOptions& o, int& status, const std::string& prefix = "") const {
    const std::string node1 = prefix + DTRAIN_LAUNCH_NODE + " 1 2 " + std::to_string(o.master_port) + " " +
                              (dir_ / "node1-logs").string() + " -- /bin/sh -c '" + o.command[2] + "' > " +
                              (dir_ / "node1.out").string() + " 2>&1";
    return std::thread([this, node1, &status] {
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (launcher_stderr().find("rendezvous store at") == std::string::npos && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      status = std::system(node1.c_str());
    });
  }

  dtrain::testing::ScratchDir dir_;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

inline std::string fmt_command(const std::string& program, const std::string& args) {
  return "OMP_NUM_THREADS=1 " + program + " " + args;
}

// A port no one listens on now (the kernel's pick for port 0), for a job that needs an agreed
// --master-port.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ADD_FAILURE() << "no free port: " << std::strerror(errno);
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

}  // namespace dtrain::launch
