// The run folder: its name, its layout, collisions between runs started in the same second,
// config.yaml that loads back to the same RunConfig, and agreement on the path across ranks.
#include "dtrain/io/RunDir.h"

#include <gtest/gtest.h>

#include <ctime>
#include <regex>

#include "dtrain/config/RunConfigYaml.h"
#include "io/TestDir.h"
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
  testing::TestDir dir;
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
  testing::TestDir dir;
  const auto start = local_time(2024, 1, 2, 3, 4, 5);
  const auto a = RunDir::create(dir.path(), "x", 1, start);
  const auto b = RunDir::create(dir.path(), "x", 1, start);
  EXPECT_NE(a.root(), b.root());
  EXPECT_EQ(b.root().filename(), "20240102-030405_x-2");
}

TEST(RunDir, ConfigYamlLoadsBackIdentical) {
  testing::TestDir dir;
  const auto run = RunDir::create(dir.path(), "cfg");
  config::RunConfig c;
  c.name = "cfg";
  c.optim.lr = 0.003;
  c.data.synthetic_shape = {3, 32, 32};
  run.write_config(c);
  EXPECT_TRUE(config::load_run_config(run.config_path().string()) == c);
}

TEST(RunDir, CreateSharedAgreesAcrossRanks) {
  testing::TestDir dir;
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

}  // namespace
}  // namespace dtrain::io
