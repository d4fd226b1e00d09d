// The mpi backend under mpirun: each process is one rank and runs every test. The Communicator
// contract runs here at mpirun's world size (CommunicatorConformance.h); below it, what only mpi
// has: a receive that a shorter message fills, a receive that times out and is withdrawn, a
// rendezvous that disagrees with mpirun. Built as dtrain_comm_mpi_tests and run by CTest at world
// sizes 1 to 4 (comm.mpi.np1..4), e.g.
//   mpirun -n 4 --oversubscribe build/tests/comm/dtrain_comm_mpi_tests
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/CommunicatorConformance.h"
#include "dtrain/comm/Communicator.h"
#include "dtrain/comm/mpi/MpiCommunicator.h"
#include "dtrain/util/Clock.h"

namespace dtrain::comm {
namespace {

using dtrain::testing::CommunicatorConformance;
using dtrain::testing::ConformanceWorld;

// MPI_COMM_WORLD's communicator, owned by main().
Communicator* g_world = nullptr;

Communicator& world() {
  return *g_world;
}

// Evaluated when gtest registers the tests, after main() connected: the world size is mpirun's.
std::vector<ConformanceWorld> mpi_worlds() {
  ConformanceWorld world;
  world.backend = "mpi";
  world.size = g_world->size();
  // MPI reduces every dtype dtrain moves (float16 and bfloat16 through its own operations).
  world.reduced_dtypes = dtrain::testing::kMovedDtypes;
  world.run = [](const dtrain::testing::RankFn& fn) { fn(*g_world); };
  return {world};
}

INSTANTIATE_TEST_SUITE_P(Mpi, CommunicatorConformance, ::testing::ValuesIn(mpi_worlds()),
                         dtrain::testing::conformance_name);

BackendOptions mpi_options(std::chrono::milliseconds timeout) {
  BackendOptions options;
  options.name = "mpi";
  options.timeout = timeout;
  return options;
}

TEST(MpiCommunicator, RecvOfAShorterMessageIsAnError) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "no peer at world size 1";
  if (world().rank() == 0) {
    auto small = at::ones({3});
    world().send(small, 1, 9);
  } else if (world().rank() == 1) {
    auto big = at::zeros({8});
    try {
      world().recv(big, 0, 9);
      FAIL() << "a 3-element message filled an 8-element recv without error";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("received 3 elements"), std::string::npos) << e.what();
    }
  }
  world().barrier();
}

TEST(MpiCommunicator, RecvFromAPeerThatNeverSendsTimesOut) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "no peer at world size 1";
  const auto timeout = std::chrono::milliseconds(500);
  auto impatient = connect_mpi(mpi_options(timeout), RendezvousInfo{});
  if (impatient->rank() == 0) {
    for (bool async_op : {false, true}) {
      auto t = at::zeros({16});
      const auto start = util::Clock::now();
      try {
        auto work = impatient->recv(t, 1, /*tag=*/42, async_op);
        work->wait();
        FAIL() << "recv from a silent peer returned";
      } catch (const CommError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("[rank 0/"), std::string::npos) << what;
        EXPECT_NE(what.find("recv"), std::string::npos) << what;
        EXPECT_NE(what.find("timed out after 0.5 s"), std::string::npos) << what;
      }
      const double waited = util::seconds_since(start);
      EXPECT_GE(waited, 0.45);
      EXPECT_LT(waited, 5.0);
    }
  }
  world().barrier();
  // The cancelled receive left nothing behind: the communicator still works.
  auto ones = at::ones({4});
  impatient->allreduce(ones);
  EXPECT_TRUE(at::equal(ones, at::full({4}, static_cast<float>(n))));
}

TEST(MpiCommunicator, RendezvousThatDisagreesWithMpirunIsAnError) {
  RendezvousInfo claimed;
  claimed.source = "torchrun";
  claimed.rank = world().rank();
  claimed.world_size = world().size() + 3;
  try {
    connect_mpi(mpi_options(std::chrono::seconds(5)), claimed);
    FAIL() << "a world size of " << claimed.world_size << " was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("world size " + std::to_string(world().size())), std::string::npos) << what;
    EXPECT_NE(what.find("world size " + std::to_string(world().size() + 3)), std::string::npos) << what;
  }
}

// Non-root ranks print only their failures, each line naming the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(std::string prefix) : prefix_(std::move(prefix)) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "%s %s:%d: Failure\n%s\n", prefix_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "%s [  FAILED  ] %s.%s\n", prefix_.c_str(), info.test_suite_name(), info.name());
    }
  }

 private:
  std::string prefix_;
};

void print_failures_only(const Communicator& comm) {
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter("[rank " + std::to_string(comm.rank()) + "/" +
                                          std::to_string(comm.size()) + "]"));
}

}  // namespace
}  // namespace dtrain::comm

int main(int argc, char** argv) {
  using namespace dtrain::comm;
  int failed = 0;
  {
    // Connected before gtest registers the tests: the conformance suite takes its world size from
    // it. A generous timeout: a rank that fails an assertion and skips a collective turns the
    // others' hang into a CommError instead of a stuck job.
    auto world = connect_mpi(mpi_options(std::chrono::seconds(60)), RendezvousInfo{});
    g_world = world.get();
    ::testing::InitGoogleTest(&argc, argv);
    if (world->rank() != 0) print_failures_only(*world);
    const int mine = RUN_ALL_TESTS() != 0 ? 1 : 0;
    // Every rank exits non-zero when any rank failed, so mpirun and CTest see the failure.
    auto verdict = at::full({1}, mine, at::kInt);
    world->allreduce(verdict, ReduceOp::Max);
    failed = verdict.item<int>();
    g_world = nullptr;
  }  // the communicator is gone before MPI is finalised at exit
  return failed;
}
