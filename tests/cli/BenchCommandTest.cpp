// `dtrain bench comm`: size parsing, bus-bandwidth factors, option checks, the JSON line's exact
// fields, and real measurements on one rank (through the command line) and on two (threads).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/DataTestUtil.h"
#include "dtrain/cli/BenchCommand.h"
#include "dtrain/cli/BenchData.h"
#include "dtrain/cli/Commands.h"
#include "dtrain/comm/Backend.h"
#include "support/ThreadWorld.h"

namespace dtrain::cli {
namespace {

// Runs `dtrain bench ...` in this process: the exit code, stdout's JSON lines and stderr's table.
struct BenchRun {
  int code;
  std::vector<nlohmann::json> rows;
  std::string table;
};
BenchRun run_bench(std::vector<std::string> args) {
  CLI::App app;
  auto bench = add_bench_command(app);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  BenchRun run;
  run.code = bench();
  std::istringstream lines(::testing::internal::GetCapturedStdout());
  run.table = ::testing::internal::GetCapturedStderr();
  std::string line;
  while (std::getline(lines, line)) run.rows.push_back(nlohmann::json::parse(line));
  return run;
}

TEST(BenchCommand, SizesTakePowersOf1024) {
  EXPECT_EQ(parse_sizes("4K,1M,16M,64M"), (std::vector<std::int64_t>{4096, 1 << 20, 16 << 20, 64 << 20}));
  EXPECT_EQ(parse_sizes("100,2g,8kB"), (std::vector<std::int64_t>{100, 2LL << 30, 8192}));
}

TEST(BenchCommand, BadSizesNameTheItem) {
  for (const std::string bad : {"4Q", "", "1M,,4K", "-1", "0", "K", "1.5M", "4K "}) {
    try {
      parse_sizes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--sizes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("e.g. --sizes 4K,1M,16M"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchCommand, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("allreduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor("allgather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("broadcast", 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor("sendrecv", 4), 1.0);
  EXPECT_THROW(bus_factor("alltoall", 2), std::invalid_argument);
}

TEST(BenchCommand, ValidateRejectsWhatWouldFailLater) {
  BenchCommOptions ok;
  EXPECT_NO_THROW(validate(ok));
  auto rejects = [](BenchCommOptions o) { EXPECT_THROW(validate(o), std::invalid_argument); };
  BenchCommOptions o = ok;
  o.backend = "carrier-pigeon";
  rejects(o);
  o = ok;
  o.op = "gather";
  rejects(o);
  o = ok;
  o.dtype = "float8";
  rejects(o);
  o = ok;
  o.iters = 0;
  rejects(o);
  o = ok;
  o.sizes = "1X";
  rejects(o);
}

TEST(BenchCommand, UnknownDtypeListsTheAcceptedOnes) {
  BenchCommOptions o;
  o.dtype = "float8";
  try {
    validate(o);
    FAIL() << "--dtype float8 was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--dtype"), std::string::npos) << what;
    EXPECT_NE(what.find("'float8'"), std::string::npos) << what;
    EXPECT_NE(what.find("float32, float64, int32, int64"), std::string::npos) << what;
  }
}

TEST(BenchCommand, JsonLineHasExactlyTheFields) {
  BenchCommResult r{"allgather", "gloo", 2, 4096, 123.4567, 0.0331, 0.0166};
  const auto j = nlohmann::json::parse(to_json_line(r));
  std::set<std::string> keys;
  for (const auto& item : j.items()) keys.insert(item.key());
  EXPECT_EQ(keys, (std::set<std::string>{"op", "backend", "world", "bytes", "median_us", "algbw_GBps",
                                         "busbw_GBps"}));
  EXPECT_EQ(j["op"], "allgather");
  EXPECT_EQ(j["world"], 2);
  EXPECT_EQ(j["bytes"], 4096);
  EXPECT_NEAR(j["median_us"].get<double>(), 123.457, 1e-9);
}

// The whole command on one rank: parsing, connecting from the environment, one line per size.
TEST(BenchCommand, OneRankCommandPrintsOneJsonLinePerSize) {
  const auto [code, rows, table] =
      run_bench({"bench", "comm", "--op", "allgather", "--sizes", "4K,1026", "--iters", "3"});
  ASSERT_EQ(code, 0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["bytes"], 4096);
  EXPECT_EQ(rows[1]["bytes"], 1024);  // rounded down to whole float32 elements
  EXPECT_EQ(rows[0]["world"], 1);
  EXPECT_EQ(rows[0]["busbw_GBps"], 0.0);  // (n-1)/n of nothing: one rank moves no bytes
  EXPECT_NE(table.find("median_us"), std::string::npos);
}

TEST(BenchCommand, TwoRanksMeasureTheSlowestRank) {
  BenchCommOptions o;
  o.op = "reduce_scatter";
  o.iters = 5;
  o.warmup = 1;
  std::vector<BenchCommResult> results(2);
  dtrain::testing::run_world(
      2, [&](std::shared_ptr<comm::Communicator> c) { results[c->rank()] = measure(*c, o, 4098); });
  for (const auto& r : results) {
    EXPECT_EQ(r.world, 2);
    EXPECT_EQ(r.bytes, 4096);
    EXPECT_GT(r.median_us, 0.0);
    EXPECT_NEAR(r.busbw_GBps, r.algbw_GBps * 0.5, 1e-12);
  }
  // Every rank reports the same per-iteration maxima, hence the same median.
  EXPECT_DOUBLE_EQ(results[0].median_us, results[1].median_us);
}

// sendrecv: each rank's whole buffer goes to the next rank (nccl-tests' sendrecv_perf), busbw = algbw;
// on one rank there is nobody to exchange with, and the command says so.
TEST(BenchCommand, SendrecvExchangesAroundTheRing) {
  BenchCommOptions o;
  o.op = "sendrecv";
  o.iters = 5;
  o.warmup = 1;
  std::vector<BenchCommResult> results(3);
  dtrain::testing::run_world(
      3, [&](std::shared_ptr<comm::Communicator> c) { results[c->rank()] = measure(*c, o, 4098); });
  for (const auto& r : results) {
    EXPECT_EQ(r.op, "sendrecv");
    EXPECT_EQ(r.world, 3);
    EXPECT_EQ(r.bytes, 4096);
    EXPECT_GT(r.median_us, 0.0);
    EXPECT_DOUBLE_EQ(r.busbw_GBps, r.algbw_GBps);
  }
  EXPECT_DOUBLE_EQ(results[0].median_us, results[2].median_us);
  dtrain::testing::run_world(1, [&](std::shared_ptr<comm::Communicator> c) {
    try {
      measure(*c, o, 4096);
      ADD_FAILURE() << "sendrecv on one rank was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("at least 2 ranks"), std::string::npos) << e.what();
    }
  });
}

TEST(BenchData, ThreadListsAreCheckedItemByItem) {
  EXPECT_EQ(parse_thread_list("0,1,2,4"), (std::vector<int>{0, 1, 2, 4}));
  for (const std::string bad : {"", "1,,2", "-1", "two", "1.5", "999"}) {
    try {
      parse_thread_list(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--threads"), std::string::npos) << e.what();
    }
  }
  BenchDataOptions o;
  o.dataset = "image-folder";
  EXPECT_THROW(validate(o), std::invalid_argument);
  o = BenchDataOptions{};
  o.export_images = 10;
  EXPECT_THROW(validate(o), std::invalid_argument);  // nowhere to export to
}

TEST(BenchData, InMemoryAndImageFolderThroughTheCommandLine) {
  dtrain::data::testing::TempDir dir;
  dtrain::data::testing::write_mnist(dir.str(), "train", 64, false);
  dtrain::data::testing::write_mnist(dir.str(), "t10k", 8, false);
  const std::string folder = dir / "folder";
  const std::string plot = dir / "plots/io.png";
  const auto [code, rows, table] =
      run_bench({"bench", "data", "--dataset", "mnist", "--root", dir.str(), "--image-folder", folder,
                 "--export", "40", "--threads", "0,2", "--batch", "8", "--batches", "5", "--plot", plot});
  ASSERT_EQ(code, 0) << table;
  ASSERT_EQ(rows.size(), 4u);  // threads 0 and 2 for each source
  EXPECT_EQ(rows[0]["source"], "in-memory");
  EXPECT_EQ(rows[0]["threads"], 0);
  EXPECT_EQ(rows[1]["threads"], 2);
  EXPECT_EQ(rows[1]["samples"], 40);  // 5 batches of 8
  EXPECT_GT(rows[1]["samples_per_second"].get<double>(), 0.0);
  EXPECT_EQ(rows[2]["source"], "image-folder");
  EXPECT_EQ(rows[2]["threads"], 1);   // decoding needs at least one thread
  EXPECT_EQ(rows[3]["samples"], 40);  // 4 per class: none is a 10th, held out for testing
  EXPECT_NE(table.find("samples/s"), std::string::npos);
  std::ifstream png(plot, std::ios::binary);
  std::string magic(8, '\0');
  png.read(magic.data(), 8);
  EXPECT_EQ(magic, std::string("\x89PNG\r\n\x1a\n", 8));
}

}  // namespace
}  // namespace dtrain::cli
