// Note [Launchers that share a host]: the threads each worker gets where several launchers of one
// job share a machine's cores, from the shares they said, and from two real nodes on this host.
#include <gtest/gtest.h>

#include <sched.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/launch/Launcher.h"
#include "dtrain/launch/WorkerEnvironment.h"
#include "launch/LauncherFixture.h"

namespace dtrain::launch {
namespace {

namespace fs = std::filesystem;

// Note [Launchers that share a host]: the threads a worker gets from the shares every launcher
// said, against the division by hand.
TEST(ThreadsPerWorker, TheCoresAreSplitAmongTheWorkersOfEveryLauncherOnThem) {
  LaunchOptions o;
  o.nproc_per_node = 2;
  const std::vector<HostShare> shares{
      {"boot-a/0-7", 2}, {"boot-b/0-7", 4}, {"boot-a/0-7", 2}, {"boot-a/0-3", 1}};
  // Two launchers of 2 workers on cores 0-7: 8 / (2 + 2), not 8 / 2; the launcher of 4 workers
  // on another machine and the one pinned to cores 0-3 share nothing with them.
  EXPECT_EQ(threads_per_worker(o, 8, "boot-a/0-7", shares), 2);
  EXPECT_EQ(threads_per_worker(o, 12, "boot-b/0-7", shares), 3);
  EXPECT_EQ(threads_per_worker(o, 4, "boot-a/0-3", shares), 4);
  // Alone on its cores, or with no share said there, a launcher divides them among its own workers.
  EXPECT_EQ(threads_per_worker(o, 8, "boot-c/0-7", {{"boot-c/0-7", 2}}), 4);
  EXPECT_EQ(threads_per_worker(o, 8, "boot-d/0-7", shares), 4);
  // More workers than cores: one thread each.
  EXPECT_EQ(threads_per_worker(o, 3, "boot-a/0-7", shares), 1);
  // A user's OMP_NUM_THREADS wins over the division, and --threads over both.
  o.environment["OMP_NUM_THREADS"] = "7";
  EXPECT_EQ(threads_per_worker(o, 8, "boot-a/0-7", shares), 7);
  o.threads = 3;
  EXPECT_EQ(threads_per_worker(o, 8, "boot-a/0-7", shares), 3);
}

// Launchers on this machine name the same cores alike; one pinned to fewer cores names others.
TEST(ThreadsPerWorker, SharedCoresAreNamedByMachineAndAffinity) {
  const std::string here = shared_cores_id();
  EXPECT_EQ(shared_cores_id(), here);
  EXPECT_NE(here.find('/'), std::string::npos) << here;
  if (usable_cores() < 2) GTEST_SKIP() << "one usable core: no other affinity to compare with";
  std::string pinned;
  std::thread([&pinned] {
    cpu_set_t all;
    CPU_ZERO(&all);
    ASSERT_EQ(::sched_getaffinity(0, sizeof(all), &all), 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &all)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);  // this thread only
    pinned = shared_cores_id();
  }).join();
  EXPECT_NE(pinned, here);
  EXPECT_EQ(pinned.substr(0, pinned.find('/')), here.substr(0, here.find('/')));  // the same machine
}

// Two nodes of one job on this host (node 1 in its own process), one worker each: each worker
// gets half the cores, as two workers of one node would, not all of them.
TEST_F(LauncherTest, NodesOnOneHostSplitItsCoresAmongAllTheirWorkers) {
  const int port = free_port();
  // Node 1's launcher runs with this process's environment, which has no TEST_DIR.
  auto o = options(1, "echo $OMP_NUM_THREADS > " + (dir_ / "threads_").string() + "$RANK");
  o.environment.erase("OMP_NUM_THREADS");
  o.nnodes = 2;
  o.master_port = port;
  int node1_status = -1;
  std::thread other_node = start_node1(o, node1_status, "env -u OMP_NUM_THREADS ");
  const LaunchResult result = launch(o);
  other_node.join();
  ASSERT_EQ(result.exit_code, 0) << result.failure << launcher_stderr();
  ASSERT_TRUE(WIFEXITED(node1_status)) << read_file(dir_ / "node1.out");
  ASSERT_EQ(WEXITSTATUS(node1_status), 0) << read_file(dir_ / "node1.out");
  const std::string expected = std::to_string(std::max(1, usable_cores() / 2)) + "\n";
  EXPECT_EQ(read_file(dir_ / "threads_0"), expected);
  EXPECT_EQ(read_file(dir_ / "threads_1"), expected);
}

// Before any worker starts, a node waits for every other node's share of its host (Note
// [Launchers that share a host]); one that never comes is named once the rendezvous times out.
TEST_F(LauncherTest, ANodeThatNeverJoinsIsNamedBeforeAnyWorkerStarts) {
  auto o = options(1, "touch \"$TEST_DIR/started\"");
  o.nnodes = 2;
  o.master_port = free_port();
  o.rendezvous_timeout = std::chrono::milliseconds(500);
  try {
    launch(o);
    FAIL() << "node 0 started without node 1";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("node(s) 1 of --nnodes 2 did not join within the rendezvous timeout"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "started"));
}

}  // namespace
}  // namespace dtrain::launch
