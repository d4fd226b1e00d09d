// The Communicator contract, part 3: the accounting in CommStats. Calls, payload bytes and time
// waiting for every operation, and the bytes each rank sends: what the backend's own algorithm
// puts on the wire (Note [Wire bytes]), compared with the figures each backend's test file works
// out from that algorithm's description. See CommunicatorConformance.h.
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "comm/CommunicatorConformance.h"
#include "dtrain/util/Clock.h"

namespace dtrain::testing {
namespace {

using comm::CommOp;
using comm::CommStats;
using comm::Communicator;
using comm::OpStats;
using comm::ReduceOp;
using comm::WireCall;

WireCall float_call(CommOp op, std::int64_t numel, bool async_op = false, int root = 0) {
  WireCall call;
  call.op = op;
  call.numel = numel;
  call.element_size = 4;
  call.async_op = async_op;
  call.root = root;
  return call;
}

void expect_stats(const CommStats& stats, int n) {
  const std::uint64_t kb4 = 4096;
  const OpStats& allreduce = stats.ops.at("allreduce");
  EXPECT_EQ(allreduce.calls, 4u);
  EXPECT_EQ(allreduce.bytes, 4 * kb4);
  EXPECT_GT(allreduce.wait_seconds, 0.0);
  const OpStats& allgather = stats.ops.at("allgather");
  EXPECT_EQ(allgather.calls, 1u);
  EXPECT_EQ(allgather.bytes, n * kb4);
  const OpStats& broadcast = stats.ops.at("broadcast");
  EXPECT_EQ(broadcast.calls, 1u);
  EXPECT_EQ(broadcast.bytes, kb4);
  EXPECT_EQ(stats.total().calls, 6u);
}

TEST_P(CommunicatorConformance, StatsCountCallsBytesAndWaiting) {
  const int n = this->n();
  world([&](Communicator& comm) {
    comm.reset_stats();
    at::Tensor t = on_device(at::ones({1024}));  // 4 KiB
    for (int k = 0; k < 3; ++k) comm.allreduce(t);
    comm.allreduce(t, ReduceOp::Sum, /*async_op=*/true)->wait();
    at::Tensor out = on_device(at::empty({n * 1024}));
    comm.allgather(t, out);
    comm.broadcast(t, 0);
    if (n == 1) {
      EXPECT_EQ(comm.stats().total().calls, 0u) << "a single rank communicates nothing";
    } else {
      expect_stats(comm.stats(), n);
      const auto& expected = GetParam().expected_wire_bytes;
      const int r = comm.rank();
      EXPECT_EQ(comm.stats().ops.at("allreduce").wire_bytes,
                3 * expected(float_call(CommOp::Allreduce, 1024), r) +
                    expected(float_call(CommOp::Allreduce, 1024, /*async_op=*/true), r));
    }
    comm.reset_stats();
    EXPECT_EQ(comm.stats().total().calls, 0u);
  });
}

// A wait() on an operation that completed() already saw finish spends no time waiting, and says
// so: its stats gain the call but not a moment of waiting (Work::poll, Note [The cost of a small
// call]).
TEST_P(CommunicatorConformance, WaitOnAFinishedOperationAddsNoWaitingTime) {
  if (n() == 1) GTEST_SKIP() << "a single rank communicates nothing";
  world([&](Communicator& comm) {
    comm.reset_stats();
    at::Tensor t = on_device(at::ones({1024}));
    comm::WorkPtr work = comm.allreduce(t, ReduceOp::Sum, /*async_op=*/true);
    const auto deadline = util::Clock::now() + std::chrono::seconds(20);
    while (!work->completed() && util::Clock::now() < deadline) std::this_thread::yield();
    ASSERT_TRUE(work->completed());
    work->wait();
    const CommStats stats = comm.stats();
    const OpStats& allreduce = stats.ops.at("allreduce");
    EXPECT_EQ(allreduce.calls, 1u);
    EXPECT_EQ(allreduce.wait_seconds, 0.0);
    comm.allreduce(t, ReduceOp::Sum, /*async_op=*/true)->wait();
    EXPECT_EQ(comm.stats().ops.at("allreduce").calls, 2u);
  });
}

// Runs `run` and checks the wire bytes it added to `op`'s stats against the backend's algorithm.
class WireCheck {
 public:
  WireCheck(Communicator& comm, const ConformanceWorld& world) : comm_(comm), world_(world) {}

  void operator()(const std::string& op, const WireCall& call, const std::function<void()>& run) {
    const CommStats before = comm_.stats();
    run();
    const CommStats added = comm::difference(comm_.stats(), before);
    const auto it = added.ops.find(op);
    ASSERT_NE(it, added.ops.end()) << op << " was not counted";
    EXPECT_EQ(it->second.calls, 1u) << op;
    EXPECT_EQ(it->second.wire_bytes, world_.expected_wire_bytes(call, comm_.rank()))
        << op << " of " << call.numel << " x " << call.element_size << " bytes"
        << (call.async_op ? ", async" : ", blocking") << ", root " << call.root << ", on rank "
        << comm_.rank() << " of " << comm_.size();
  }

 private:
  Communicator& comm_;
  const ConformanceWorld& world_;
};

// 1001 floats: uneven chunks; 4 KiB and 256 KiB: either side of the mpi backend's thresholds.
const std::int64_t kAllreduceSizes[] = {1001, 1024, 65536};

TEST_P(CommunicatorConformance, WireBytesAreWhatTheBackendsAlgorithmSends) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "a single rank sends nothing";
  world([&](Communicator& comm) {
    WireCheck check(comm, GetParam());
    for (const std::int64_t numel : kAllreduceSizes) {
      for (const bool async_op : {false, true}) {
        at::Tensor t = on_device(at::ones({numel}));
        check("allreduce", float_call(CommOp::Allreduce, numel, async_op),
              [&] { comm.allreduce(t, ReduceOp::Sum, async_op)->wait(); });
      }
    }
    at::Tensor t = on_device(at::ones({1024}));
    at::Tensor gathered = on_device(at::empty({n * 1024}));
    check("allgather", float_call(CommOp::Allgather, 1024), [&] { comm.allgather(t, gathered); });
    for (const int root : {0, n - 1}) {
      check("broadcast", float_call(CommOp::Broadcast, 1024, false, root), [&] { comm.broadcast(t, root); });
    }
    at::Tensor chunks = on_device(at::ones({n * 1024}));
    for (const bool async_op : {false, true}) {
      check("reduce_scatter", float_call(CommOp::ReduceScatter, n * 1024, async_op),
            [&] { comm.reduce_scatter(chunks, t, ReduceOp::Sum, async_op)->wait(); });
      check("allgather", float_call(CommOp::Allgather, 1024, async_op),
            [&] { comm.allgather(t, gathered, async_op)->wait(); });
    }
    check("alltoall", float_call(CommOp::Alltoall, n * 1024), [&] { comm.alltoall(chunks, gathered); });
    const int next = (comm.rank() + 1) % n;
    const int previous = (comm.rank() + n - 1) % n;
    at::Tensor inbox = on_device(at::empty({1024}));
    comm::WorkPtr receive;  // counted when posted
    check("recv", float_call(CommOp::Recv, 1024),
          [&] { receive = comm.recv(inbox, previous, /*tag=*/5, /*async_op=*/true); });
    check("send", float_call(CommOp::Send, 1024), [&] { comm.send(t, next, /*tag=*/5); });
    receive->wait();
    check("barrier", WireCall{}, [&] { comm.barrier(); });
  });
}

}  // namespace
}  // namespace dtrain::testing
