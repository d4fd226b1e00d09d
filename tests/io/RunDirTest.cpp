// The run folder: its name, its layout, collisions between runs started in the same second,
// config.yaml that loads back to the same RunConfig, and agreement on the path across ranks.
#include "dtrain/io/RunDir.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <regex>

#include "dtrain/config/RunConfigYaml.h"
#include "support/ScratchDir.h"
#include "support/ThreadWorld.h"

namespace dtrain::io {
namespace {

std::chrono::system_clock::time_point local_time(int year, int month, int day, int h, int m, int s) {
  std::tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = day;
  t.tm_hour = h;
  t.tm_min = m;
  t.tm_sec = s;
  t.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&t));
}

TEST(RunDir, FolderNameAndLayout) {
  dtrain::testing::ScratchDir dir;
  const auto start = local_time(2024, 3, 5, 7, 8, 9);
  EXPECT_EQ(run_folder_name(start, "lenet"), "20240305-070809_lenet");
  const auto run = RunDir::create(dir.path() / "runs", "lenet", 2, start);
  EXPECT_EQ(run.root(), dir.path() / "runs" / "20240305-070809_lenet");
  EXPECT_TRUE(std::filesystem::is_directory(run.checkpoints_dir()));
  EXPECT_TRUE(std::filesystem::is_directory(run.root() / "site_0"));
  EXPECT_EQ(run.log_path(), run.root() / "site_0" / "log.txt");
  // Another rank sees the same folder and adds only its own site folder.
  const auto other = RunDir::open(run.root(), 1, 2);
  EXPECT_TRUE(std::filesystem::is_directory(run.root() / "site_1"));
  EXPECT_EQ(other.checkpoints_dir(), run.checkpoints_dir());
  EXPECT_THROW(RunDir::open(dir.path() / "missing", 1, 2), std::runtime_error);
  EXPECT_THROW(RunDir::create(dir.path(), "a/b"), std::invalid_argument);
}

TEST(RunDir, SameSecondSameNameGetsASuffix) {
  dtrain::testing::ScratchDir dir;
  const auto start = local_time(2024, 1, 2, 3, 4, 5);
  const auto a = RunDir::create(dir.path(), "x", 1, start);
  const auto b = RunDir::create(dir.path(), "x", 1, start);
  EXPECT_NE(a.root(), b.root());
  EXPECT_EQ(b.root().filename(), "20240102-030405_x-2");
}

TEST(RunDir, ConfigYamlLoadsBackIdentical) {
  dtrain::testing::ScratchDir dir;
  const auto run = RunDir::create(dir.path(), "cfg");
  config::RunConfig c;
  c.name = "cfg";
  c.optim.lr = 0.003;
  c.data.synthetic_shape = {3, 32, 32};
  run.write_config(c);
  EXPECT_TRUE(config::load_run_config(run.config_path().string()) == c);
}

TEST(RunDir, CreateSharedAgreesAcrossRanks) {
  dtrain::testing::ScratchDir dir;
  std::vector<std::filesystem::path> roots(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr communicator) {
    roots[communicator->rank()] = RunDir::create_shared(*communicator, dir.path(), "shared").root();
  });
  EXPECT_EQ(roots[0], roots[1]);
  EXPECT_TRUE(std::filesystem::is_directory(roots[0] / "site_0"));
  EXPECT_TRUE(std::filesystem::is_directory(roots[0] / "site_1"));
  int folders = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) folders += entry.is_directory();
  EXPECT_EQ(folders, 1);
}

TEST(RunDir, NamedFolderIsOutDirSlashNameAndRefusesAnEarlierRunUnlessContinuing) {
  dtrain::testing::ScratchDir dir;
  const auto run = RunDir::create_named(dir.path() / "logs", "rankdad_mnist", 2, /*continuing=*/false);
  EXPECT_EQ(run.root(), dir.path() / "logs" / "rankdad_mnist");
  EXPECT_TRUE(std::filesystem::is_directory(run.root() / "site_0"));
  EXPECT_TRUE(std::filesystem::is_directory(run.checkpoints_dir()));
  auto refusal = [&] {
    try {
      RunDir::create_named(dir.path() / "logs", "rankdad_mnist", 2, false);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("an earlier run's folder was reused");
  };
  const std::string refused = "run folder " + run.root().string() +
                              " holds an earlier run, and a new run would mix with it; choose another name "
                              "(--name) or remove the folder";
  EXPECT_EQ(refusal(), refused + " (that run saved no checkpoint to continue from)");
  std::ofstream(run.checkpoints_dir() / "latest") << "checkpoint-5.ckpt\n";
  EXPECT_EQ(refusal(), refused + ", or continue that run with --resume " + run.root().string());
  EXPECT_EQ(RunDir::create_named(dir.path() / "logs", "rankdad_mnist", 2, /*continuing=*/true).root(),
            run.root());
  // An empty folder holds no run to mix with.
  std::filesystem::create_directories(dir.path() / "logs" / "empty");
  EXPECT_NO_THROW(RunDir::create_named(dir.path() / "logs", "empty", 1, false));
  for (const char* name : {"", ".", "..", "a/b"}) {
    EXPECT_THROW(RunDir::create_named(dir.path(), name, 1, false), std::invalid_argument) << name;
  }
}

TEST(RunDir, CreateNamedSharedAgreesAcrossRanksAndRefusesTogether) {
  dtrain::testing::ScratchDir dir;
  std::vector<std::filesystem::path> roots(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr communicator) {
    roots[communicator->rank()] =
        RunDir::create_named_shared(*communicator, dir.path(), "seed", false).root();
  });
  EXPECT_EQ(roots[0], dir.path() / "seed");
  EXPECT_EQ(roots[1], roots[0]);
  EXPECT_TRUE(std::filesystem::is_directory(roots[0] / "site_1"));
  std::ofstream(roots[0] / "site_1" / "log.txt") << "[rank 1/2] an earlier run\n";

  // Again: rank 0 refuses, and rank 1 says so rather than waiting.
  std::vector<std::string> errors(2);
  auto attempt = [&](bool continuing_on_rank0) {
    dtrain::testing::run_world(2, [&](comm::CommunicatorPtr communicator) {
      const int rank = communicator->rank();
      try {
        RunDir::create_named_shared(*communicator, dir.path(), "seed", rank == 0 && continuing_on_rank0);
        errors[rank].clear();
      } catch (const std::runtime_error& e) {
        errors[rank] = e.what();
      }
    });
  };
  attempt(false);
  EXPECT_EQ(errors[0].rfind("run folder " + roots[0].string() + " holds an earlier run", 0), 0u) << errors[0];
  EXPECT_EQ(errors[1].rfind("[rank 1/2] rank 0 could not create the run folder: run folder", 0), 0u)
      << errors[1];
  // Rank 1's own site folder from an earlier run (as on a machine of its own, where rank 0's
  // folder is new): rank 1 refuses it, and rank 0 learns so instead of waiting in a collective.
  attempt(true);
  EXPECT_EQ(
      errors[1].rfind(
          "[rank 1/2] run folder " + (roots[0] / "site_1").string() + " holds an earlier run's site_1", 0),
      0u)
      << errors[1];
  EXPECT_EQ(errors[0],
            "[rank 0/2] rank 1 refused its run folder (see its error); run folder " + roots[0].string());
}

}  // namespace
}  // namespace dtrain::io
