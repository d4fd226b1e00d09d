// mpirun's own output as the launcher reads it: the process map of --display-map (which node runs
// each rank, kept out of the launcher's stderr), rank output routed by tag, and what the failure
// report says when mpirun loses another node's daemon without naming a rank or a node (Open MPI
// 4.1 sometimes prints only "ORTE was unable to reliably start one or more daemons" then).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/launch/Diagnostics.h"
#include "dtrain/launch/FailureReport.h"
#include "dtrain/launch/MpiOutputDemux.h"
#include "dtrain/launch/RankLog.h"
#include "dtrain/launch/Spawn.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::launch {
namespace {

// Four rank logs in a fresh folder and the launcher's stderr in a file of its own.
struct Fixture {
  dtrain::testing::ScratchDir dir;
  std::FILE* err = nullptr;
  std::unique_ptr<Diagnostics> diagnostics;
  std::vector<std::unique_ptr<RankLog>> logs;

  Fixture() {
    err = std::fopen((dir / "stderr").c_str(), "w+");
    diagnostics = std::make_unique<Diagnostics>(fileno(err), false);
    for (int r = 0; r < 4; ++r) {
      logs.push_back(std::make_unique<RankLog>(r, (dir / ("rank_" + std::to_string(r) + ".log")).string(), -1,
                                               *diagnostics, 5));
    }
  }
  ~Fixture() {
    logs.clear();
    std::fclose(err);
  }
  std::string launcher_stderr() const { return dtrain::testing::read_file(dir / "stderr"); }
};

const char* kMap =
    " Data for JOB [24336,1] offset 0 Total slots allocated 4\n"
    "\n"
    " ========================   JOB MAP   ========================\n"
    "\n"
    " Data for node: 10.213.0.1\tNum slots: 2\tMax slots: 0\tNum procs: 2\n"
    " \tProcess OMPI jobid: [24336,1] App: 0 Process rank: 0 Bound: N/A\n"
    " \tProcess OMPI jobid: [24336,1] App: 0 Process rank: 1 Bound: N/A\n"
    "\n"
    " Data for node: 10.213.0.2\tNum slots: 2\tMax slots: 0\tNum procs: 2\n"
    " \tProcess OMPI jobid: [24336,1] App: 0 Process rank: 2 Bound: N/A\n"
    " \tProcess OMPI jobid: [24336,1] App: 0 Process rank: 3 Bound: N/A\n"
    "\n"
    " =============================================================\n";

TEST(MpiOutputDemux, TheProcessMapSaysWhereEachRankRunsAndStaysOutOfTheLaunchersStderr) {
  Fixture f;
  MpiOutputDemux demux(f.logs, *f.diagnostics);
  demux.write(false, kMap);
  demux.write(false, "[1,2]<stderr>:hello from two\n");
  demux.finish(false);
  demux.finish(true);
  const std::map<int, std::string> expected{
      {0, "10.213.0.1"}, {1, "10.213.0.1"}, {2, "10.213.0.2"}, {3, "10.213.0.2"}};
  EXPECT_EQ(demux.rank_nodes(), expected);
  EXPECT_FALSE(demux.daemon_lost());
  const auto err = f.launcher_stderr();
  EXPECT_EQ(err.find("JOB MAP"), std::string::npos) << err;
  EXPECT_EQ(err.find("Data for node"), std::string::npos) << err;
  EXPECT_NE(err.find("hello from two"), std::string::npos) << err;  // rank 2's stderr, prefixed
}

TEST(MpiOutputDemux, ALostDaemonWithoutANodeIsReportedWithTheOtherNodesRanks) {
  Fixture f;
  MpiOutputDemux demux(f.logs, *f.diagnostics);
  demux.write(false, kMap);
  demux.write(true,
              "--------------------------------------------------------------------------\n"
              "ORTE was unable to reliably start one or more daemons.\n"
              "This usually is caused by:\n");
  demux.finish(false);
  demux.finish(true);
  EXPECT_TRUE(demux.daemon_lost());
  EXPECT_FALSE(demux.reported_failed_rank());
  // mpirun's own words still reach the launcher's stderr.
  EXPECT_NE(f.launcher_stderr().find("unable to reliably start"), std::string::npos);
  const MpirunAccount account{demux.reported_failed_rank(), demux.rank_nodes(), demux.daemon_lost()};
  const auto report = mpirun_failure_report(account, 4321, 9 << 8, f.logs, f.dir.string());
  EXPECT_EQ(
      report.substr(0, report.find('\n')),
      "dtrain launch: a rank of another node than rank 0's (ranks 2, 3 on 10.213.0.2: mpirun lost its daemon "
      "there) (mpirun pid 4321) failed with exit code 9");
  EXPECT_NE(report.find("every rank's log is in " + f.dir.string()), std::string::npos) << report;
}

TEST(MpiOutputDemux, ANamedRankIsReportedWithItsNodeAndWithoutAMapAsBefore) {
  Fixture f;
  MpiOutputDemux demux(f.logs, *f.diagnostics);
  demux.write(false, kMap);
  demux.write(
      true,
      "mpirun noticed that process rank 3 with PID 0 on node 10.213.0.2 exited on signal 9 (Killed).\n");
  demux.finish(false);
  demux.finish(true);
  ASSERT_TRUE(demux.reported_failed_rank());
  const MpirunAccount named{demux.reported_failed_rank(), demux.rank_nodes(), demux.daemon_lost()};
  const auto report = mpirun_failure_report(named, 4321, 9, f.logs, f.dir.string());
  EXPECT_EQ(report.substr(0, report.find('\n')),
            "dtrain launch: rank 3 on 10.213.0.2 (mpirun pid 4321) " + describe_status(9));
  // No map and no lost daemon: the report names no node.
  const auto plain = mpirun_failure_report(MpirunAccount{}, 4321, 1 << 8, f.logs, f.dir.string());
  EXPECT_EQ(plain.substr(0, plain.find('\n')),
            "dtrain launch: a rank (mpirun pid 4321) failed with exit code 1");
  // A lost daemon where every rank ran on rank 0's node names nothing more either.
  MpirunAccount one_node{std::nullopt, {{0, "vm"}, {1, "vm"}}, true};
  const auto local = mpirun_failure_report(one_node, 4321, 1 << 8, f.logs, f.dir.string());
  EXPECT_EQ(local.substr(0, local.find('\n')),
            "dtrain launch: a rank (mpirun pid 4321) failed with exit code 1");
}

TEST(MpiOutputDemux, AMapWithoutItsClosingRuleHidesNothingAfterIt) {
  Fixture f;
  MpiOutputDemux demux(f.logs, *f.diagnostics);
  const std::string map = kMap;
  demux.write(false, map.substr(0, map.rfind(" ====")));  // the closing rule never comes
  demux.write(
      false,
      "mpirun noticed that process rank 1 with PID 0 on node 10.213.0.1 exited on signal 9 (Killed).\n");
  demux.finish(false);
  demux.finish(true);
  EXPECT_EQ(demux.reported_failed_rank(), 1);
  EXPECT_EQ(demux.rank_nodes().at(3), "10.213.0.2");
  const auto err = f.launcher_stderr();
  EXPECT_NE(err.find("noticed that process rank 1"), std::string::npos) << err;
  EXPECT_EQ(err.find("Data for node"), std::string::npos) << err;
}

}  // namespace
}  // namespace dtrain::launch
