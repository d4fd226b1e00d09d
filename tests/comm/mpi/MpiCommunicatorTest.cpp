// The mpi backend under mpirun: every rank runs every test, and each result is checked against its
// closed form. Built as dtrain_comm_mpi_tests and run by CTest at world sizes 1 to 4, e.g.
//   mpirun -n 4 --oversubscribe build/tests/comm/dtrain_comm_mpi_tests
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/comm/mpi/MpiCommunicator.h"

namespace dtrain::comm {
namespace {

Communicator* g_world = nullptr;

Communicator& world() {
  return *g_world;
}

BackendOptions mpi_options(std::chrono::milliseconds timeout) {
  BackendOptions options;
  options.name = "mpi";
  options.timeout = timeout;
  return options;
}

// The element pattern i % 5 + 1, scaled per rank; sums stay small enough for int8 and exact in bf16.
at::Tensor pattern(int64_t numel, at::ScalarType dtype, double scale) {
  return ((at::arange(numel, at::kLong) % 5 + 1).to(at::kDouble) * scale).to(dtype);
}

const std::vector<at::ScalarType> kAllDtypes = {at::kFloat, at::kDouble, at::kChar, at::kShort,   at::kInt,
                                                at::kLong,  at::kByte,   at::kHalf, at::kBFloat16};
// 0 and 1 elements, an odd size below the world size, and sizes on both sides of the ring threshold.
const std::vector<int64_t> kSizes = {0, 1, 3, 1000, 40000};

TEST(MpiCommunicator, ReportsMpiRankAndSize) {
  EXPECT_EQ(world().backend(), "mpi");
  EXPECT_GE(world().rank(), 0);
  EXPECT_LT(world().rank(), world().size());
  auto ones = at::ones({1}, at::kInt);
  world().allreduce(ones);
  EXPECT_EQ(ones.item<int>(), world().size());
}

TEST(MpiCommunicator, AllreduceSumEveryDtypeAndSize) {
  const int n = world().size();
  for (auto dtype : kAllDtypes) {
    for (int64_t numel : kSizes) {
      auto t = pattern(numel, dtype, world().rank() + 1);
      world().allreduce(t, ReduceOp::Sum);
      auto expected = pattern(numel, dtype, n * (n + 1) / 2.0);
      EXPECT_TRUE(at::equal(t, expected)) << c10::toString(dtype) << " numel " << numel;
    }
  }
}

TEST(MpiCommunicator, AllreduceMaxMin) {
  const int n = world().size();
  for (auto dtype : kAllDtypes) {
    for (int64_t numel : {int64_t{1}, int64_t{1000}, int64_t{40000}}) {
      auto hi = pattern(numel, dtype, world().rank() + 1);
      auto lo = hi.clone();
      world().allreduce(hi, ReduceOp::Max);
      world().allreduce(lo, ReduceOp::Min);
      EXPECT_TRUE(at::equal(hi, pattern(numel, dtype, n))) << c10::toString(dtype) << " numel " << numel;
      EXPECT_TRUE(at::equal(lo, pattern(numel, dtype, 1))) << c10::toString(dtype) << " numel " << numel;
    }
  }
}

TEST(MpiCommunicator, AllreduceAvgOnFloatingTypes) {
  const int n = world().size();
  for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    for (int64_t numel : {int64_t{5}, int64_t{40000}}) {
      auto t = pattern(numel, dtype, 2.0 * (world().rank() + 1));
      world().allreduce(t, ReduceOp::Avg);
      EXPECT_TRUE(at::equal(t, pattern(numel, dtype, n + 1.0))) << c10::toString(dtype);
    }
  }
}

TEST(MpiCommunicator, AllreduceAvgOnIntegersIsAnError) {
  auto t = at::ones({4}, at::kLong);
  try {
    world().allreduce(t, ReduceOp::Avg);
    if (world().size() > 1) FAIL() << "avg on int64 did not throw";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("floating-point"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
  }
}

TEST(MpiCommunicator, UnsupportedDtypeIsAnError) {
  if (world().size() == 1) GTEST_SKIP() << "world size 1 never reaches the backend";
  auto t = at::ones({4}, at::kComplexFloat);
  EXPECT_THROW(world().allreduce(t), CommError);
}

TEST(MpiCommunicator, AllreduceBoolIsAnyOrAll) {
  const int n = world().size();
  // Element i is true on rank i % n only.
  auto flags = (at::arange(12, at::kLong) % n == world().rank());
  auto any = flags.clone();
  auto all = flags.clone();
  world().allreduce(any, ReduceOp::Sum);
  world().allreduce(all, ReduceOp::Min);
  EXPECT_TRUE(any.all().item<bool>());
  EXPECT_EQ(all.any().item<bool>(), n == 1);
}

TEST(MpiCommunicator, AllgatherEqualChunks) {
  const int n = world().size();
  for (auto dtype : {at::kFloat, at::kLong, at::kHalf, at::kByte}) {
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{20000}}) {
      auto input = ((at::arange(k, at::kLong) % 50) + 60 * world().rank()).to(dtype);
      auto output = at::zeros({n * k}, dtype);
      world().allgather(input, output);
      auto expected = at::empty({n * k}, dtype);
      for (int r = 0; r < n; ++r)
        expected.narrow(0, r * k, k).copy_((at::arange(k, at::kLong) % 50) + 60 * r);
      EXPECT_TRUE(at::equal(output, expected)) << c10::toString(dtype) << " chunk " << k;
    }
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  for (int root = 0; root < world().size(); ++root) {
    for (int64_t numel : {int64_t{1}, int64_t{999}, int64_t{100000}}) {
      auto expected = at::arange(numel, at::kDouble) + root;
      auto t = world().rank() == root ? expected.clone() : at::zeros({numel}, at::kDouble);
      world().broadcast(t, root);
      EXPECT_TRUE(at::equal(t, expected)) << "root " << root << " numel " << numel;
    }
  }
}

TEST(MpiCommunicator, ReduceScatterSumAvgMax) {
  const int n = world().size();
  const int r = world().rank();
  for (int64_t k : {int64_t{1}, int64_t{6}, int64_t{10000}}) {
    // input[j] = rank + j, so chunk r, element i, sums to n*(r*k + i) + n(n-1)/2 over the ranks.
    auto input = at::arange(n * k, at::kDouble) + r;
    auto base = at::arange(k, at::kDouble) + r * k;
    auto sum = at::zeros({k}, at::kDouble);
    world().reduce_scatter(input, sum, ReduceOp::Sum);
    EXPECT_TRUE(at::equal(sum, base * n + n * (n - 1) / 2.0)) << "sum, chunk " << k;
    auto avg = at::zeros({k}, at::kDouble);
    world().reduce_scatter(input, avg, ReduceOp::Avg);
    EXPECT_TRUE(at::allclose(avg, base + (n - 1) / 2.0)) << "avg, chunk " << k;
    auto max = at::zeros({k}, at::kDouble);
    world().reduce_scatter(input, max, ReduceOp::Max);
    EXPECT_TRUE(at::equal(max, base + (n - 1))) << "max, chunk " << k;
    auto ints = input.to(at::kInt);
    auto int_sum = at::zeros({k}, at::kInt);
    world().reduce_scatter(ints, int_sum, ReduceOp::Sum);
    EXPECT_TRUE(at::equal(int_sum, (base * n + n * (n - 1) / 2.0).to(at::kInt))) << "int sum, chunk " << k;
  }
}

TEST(MpiCommunicator, AlltoallTransposesChunks) {
  const int n = world().size();
  const int r = world().rank();
  for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{5000}}) {
    // Chunk j of rank r's input holds 100r + 10j + e and goes to rank j.
    auto e = at::arange(k, at::kLong) % 10;
    auto input = at::empty({n * k}, at::kLong);
    auto expected = at::empty({n * k}, at::kLong);
    for (int j = 0; j < n; ++j) {
      input.narrow(0, j * k, k).copy_(e + 100 * r + 10 * j);
      expected.narrow(0, j * k, k).copy_(e + 100 * j + 10 * r);
    }
    auto output = at::zeros({n * k}, at::kLong);
    world().alltoall(input, output);
    EXPECT_TRUE(at::equal(output, expected)) << "chunk " << k;
  }
}

TEST(MpiCommunicator, SendRecvAroundARingWithTags) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "no peer at world size 1";
  const int r = world().rank();
  const int right = (r + 1) % n;
  const int left = (r + n - 1) % n;
  for (int64_t numel : {int64_t{1}, int64_t{100}, int64_t{300000}}) {
    // Two messages on different tags, received in the opposite order to the one they were sent in.
    auto first = at::full({numel}, 10.0f * r + 1);
    auto second = at::full({numel}, 10.0f * r + 2);
    auto got_first = at::zeros({numel});
    auto got_second = at::zeros({numel});
    auto recv_second = world().recv(got_second, left, /*tag=*/2, /*async_op=*/true);
    auto recv_first = world().recv(got_first, left, /*tag=*/1, /*async_op=*/true);
    auto send_first = world().send(first, right, /*tag=*/1, /*async_op=*/true);
    auto send_second = world().send(second, right, /*tag=*/2, /*async_op=*/true);
    for (auto& work : {recv_second, recv_first, send_first, send_second}) work->wait();
    EXPECT_TRUE(at::equal(got_first, at::full({numel}, 10.0f * left + 1))) << numel;
    EXPECT_TRUE(at::equal(got_second, at::full({numel}, 10.0f * left + 2))) << numel;
  }
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

TEST(MpiCommunicator, BarrierSyncAndAsync) {
  world().barrier();
  auto work = world().barrier(/*async_op=*/true);
  work->wait();
  EXPECT_TRUE(work->completed());
}

TEST(MpiCommunicator, AsyncOperationsOverlapAndFinishInOrder) {
  const int n = world().size();
  std::vector<at::Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back(at::full({1000 + 5000 * i}, static_cast<float>(world().rank() + i)));
    works.push_back(world().allreduce(tensors.back(), ReduceOp::Sum, /*async_op=*/true));
  }
  auto input = at::full({3}, static_cast<float>(world().rank()));
  auto gathered = at::zeros({3 * n});
  auto gather = world().allgather(input, gathered, /*async_op=*/true);
  // A blocking call behind queued work goes through the queue, in order.
  auto blocking = at::ones({10});
  world().allreduce(blocking);
  EXPECT_TRUE(at::equal(blocking, at::full({10}, static_cast<float>(n))));
  for (int i = 7; i >= 0; --i) {
    works[i]->wait();
    EXPECT_TRUE(works[i]->completed());
    EXPECT_TRUE(at::equal(tensors[i], at::full_like(tensors[i], n * (n - 1) / 2.0f + n * i))) << i;
  }
  gather->wait();
  for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[3 * r].item<float>(), static_cast<float>(r));
}

TEST(MpiCommunicator, CompletedBecomesTrueWithoutWait) {
  auto t = at::ones({64});
  auto work = world().allreduce(t, ReduceOp::Sum, /*async_op=*/true);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!work->completed() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_TRUE(work->completed());
  EXPECT_EQ(t[0].item<float>(), static_cast<float>(world().size()));
}

TEST(MpiCommunicator, SplitIntoEvenAndOddRanks) {
  const int n = world().size();
  const int r = world().rank();
  std::vector<int> evens, odds;
  for (int i = 0; i < n; ++i) (i % 2 == 0 ? evens : odds).push_back(i);
  auto even = world().split(evens);
  std::unique_ptr<Communicator> odd;
  if (!odds.empty()) odd = world().split(odds);
  auto& mine = r % 2 == 0 ? even : odd;
  ASSERT_TRUE(mine);
  EXPECT_EQ(r % 2 == 0 ? odd.get() : even.get(), nullptr);
  const auto& members = r % 2 == 0 ? evens : odds;
  EXPECT_EQ(mine->size(), static_cast<int>(members.size()));
  EXPECT_EQ(mine->rank(), r / 2);
  auto t = at::full({100}, static_cast<double>(r));
  mine->allreduce(t);
  double expected = 0;
  for (int m : members) expected += m;
  EXPECT_TRUE(at::equal(t, at::full({100}, expected)));
  // The parent keeps working while the child exists.
  auto ones = at::ones({1});
  world().allreduce(ones);
  EXPECT_EQ(ones.item<float>(), static_cast<float>(n));
}

TEST(MpiCommunicator, SplitOfASplitAndASingleton) {
  const int n = world().size();
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  auto copy = world().split(all);
  ASSERT_TRUE(copy);
  auto last = copy->split({n - 1});
  EXPECT_EQ(static_cast<bool>(last), world().rank() == n - 1);
  if (last) {
    EXPECT_EQ(last->size(), 1);
    auto t = at::full({4}, 3.0f);
    last->allreduce(t);
    EXPECT_TRUE(at::equal(t, at::full({4}, 3.0f)));
  }
  auto t = at::ones({8});
  copy->allreduce(t, ReduceOp::Sum, /*async_op=*/true)->wait();
  EXPECT_TRUE(at::equal(t, at::full({8}, static_cast<float>(n))));
}

TEST(MpiCommunicator, StatsCountCallsBytesAndWaiting) {
  const int n = world().size();
  world().reset_stats();
  auto t = at::ones({1024});  // 4 KiB
  for (int i = 0; i < 3; ++i) world().allreduce(t);
  world().allreduce(t, ReduceOp::Sum, /*async_op=*/true)->wait();
  world().broadcast(t, 0);
  const CommStats stats = world().stats();
  if (n == 1) {
    EXPECT_EQ(stats.total().calls, 0u);  // nothing leaves a world of one
    return;
  }
  const OpStats& allreduce = stats.ops.at("allreduce");
  EXPECT_EQ(allreduce.calls, 4u);
  EXPECT_EQ(allreduce.bytes, 4u * 4096u);
  EXPECT_EQ(allreduce.wire_bytes, 4u * static_cast<std::uint64_t>(4096.0 * 2.0 * (n - 1) / n));
  EXPECT_GT(allreduce.wait_seconds, 0.0);
  EXPECT_EQ(stats.ops.at("broadcast").calls, 1u);
  EXPECT_EQ(stats.ops.at("broadcast").wire_bytes, world().rank() == 0 ? 4096u : 0u);
}

TEST(MpiCommunicator, RecvFromAPeerThatNeverSendsTimesOut) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "no peer at world size 1";
  const auto timeout = std::chrono::milliseconds(500);
  auto impatient = connect_mpi(mpi_options(timeout), RendezvousInfo{});
  if (impatient->rank() == 0) {
    for (bool async_op : {false, true}) {
      auto t = at::zeros({16});
      const auto start = std::chrono::steady_clock::now();
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
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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

}  // namespace
}  // namespace dtrain::comm

int main(int argc, char** argv) {
  using namespace dtrain::comm;
  ::testing::InitGoogleTest(&argc, argv);
  int failed = 0;
  {
    // A generous timeout: a rank that fails an assertion and skips a collective turns the others'
    // hang into a CommError instead of a stuck job.
    auto world = connect_mpi(mpi_options(std::chrono::seconds(60)), RendezvousInfo{});
    g_world = world.get();
    if (world->rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter("[rank " + std::to_string(world->rank()) + "/" +
                                              std::to_string(world->size()) + "]"));
    }
    const int mine = RUN_ALL_TESTS() != 0 ? 1 : 0;
    // Every rank exits non-zero when any rank failed, so mpirun and CTest see the failure.
    auto verdict = at::full({1}, mine, at::kInt);
    world->allreduce(verdict, ReduceOp::Max);
    failed = verdict.item<int>();
    g_world = nullptr;
  }  // the communicator is gone before MPI is finalised at exit
  return failed;
}
