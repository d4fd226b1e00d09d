// The Communicator contract, part 2: beyond one blocking collective. Point-to-point transfers,
// Work handles in flight (overlapping, completing without wait), barriers and subgroups from split.
// See CommunicatorConformance.h.
#include <chrono>
#include <thread>

#include "comm/CommunicatorConformance.h"
#include "dtrain/util/Clock.h"

namespace dtrain::testing {
namespace {

using comm::Communicator;
using comm::ReduceOp;
using comm::WorkPtr;

// Polls completed() (never wait()) until it turns true or a generous deadline passes.
bool completes_without_wait(const WorkPtr& work) {
  const auto deadline = util::Clock::now() + std::chrono::seconds(20);
  while (!work->completed() && util::Clock::now() < deadline) std::this_thread::yield();
  return work->completed();
}

// What rank r sends under `tag`: element i holds i + 1000 r + tag, distinct per element, rank and tag.
at::Tensor message(int rank, int tag, std::int64_t numel) {
  return at::arange(numel, at::kFloat) + (1000 * rank + tag);
}

// Two messages to the next rank on the ring, told apart by their tags and sizes; each recv names
// the tag of the message it wants, and the waits come in another order than the posts.
TEST_P(CommunicatorConformance, SendRecvAroundTheRingWithTags) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "no peer to send to";
  world([&](Communicator& comm) {
    const int next = (comm.rank() + 1) % n;
    const int prev = (comm.rank() + n - 1) % n;
    for (std::int64_t numel : {1, 5, 100, 300000}) {
      for (bool receives_first : {false, true}) {
        at::Tensor first = on_device(at::zeros({numel}));
        at::Tensor second = on_device(at::zeros({numel + 2}));
        WorkPtr r1, r2, s1, s2;
        if (receives_first) {
          r2 = comm.recv(second, prev, /*tag=*/2, /*async_op=*/true);
          r1 = comm.recv(first, prev, /*tag=*/1, /*async_op=*/true);
        }
        s1 = comm.send(on_device(message(comm.rank(), 1, numel)), next, /*tag=*/1, /*async_op=*/true);
        s2 = comm.send(on_device(message(comm.rank(), 2, numel + 2)), next, /*tag=*/2, /*async_op=*/true);
        if (!receives_first) {
          r1 = comm.recv(first, prev, /*tag=*/1, /*async_op=*/true);
          r2 = comm.recv(second, prev, /*tag=*/2, /*async_op=*/true);
        }
        for (const WorkPtr& work : {r2, r1, s1, s2}) work->wait();
        EXPECT_TRUE(same(first, message(prev, 1, numel))) << numel << (receives_first ? " recv first" : "");
        EXPECT_TRUE(same(second, message(prev, 2, numel + 2)))
            << numel << (receives_first ? " recv first" : "");
      }
    }
  });
}

// One batch per rank holding the pattern that deadlocks a backend running point-to-point messages
// in order (nccl) unless it groups them: both receives are posted before either send. Every
// transfer arrives, each is counted as the send or recv it is, and a batch refused for a bad peer
// leaves the communicator fit for the next one.
TEST_P(CommunicatorConformance, ABatchWithItsReceivesBeforeItsSendsCompletes) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "no peer to send to";
  world([&](Communicator& comm) {
    const int next = (comm.rank() + 1) % n;
    const int prev = (comm.rank() + n - 1) % n;
    try {
      comm.batch_isend_irecv({{comm::P2POp::Kind::Recv, on_device(at::zeros({4})), n, 0}});
      ADD_FAILURE() << "a receive from rank " << n << " of " << n << " was accepted";
    } catch (const comm::CommError& e) {
      EXPECT_NE(std::string(e.what()).find("recv"), std::string::npos) << e.what();
    }
    for (std::int64_t numel : {3, 100000}) {
      comm.reset_stats();
      at::Tensor from_prev = on_device(at::zeros({numel}));
      at::Tensor from_next = on_device(at::zeros({numel + 5}));
      auto works = comm.batch_isend_irecv({
          {comm::P2POp::Kind::Recv, from_prev, prev, /*tag=*/1},
          {comm::P2POp::Kind::Recv, from_next, next, /*tag=*/2},
          {comm::P2POp::Kind::Send, on_device(message(comm.rank(), 1, numel)), next, /*tag=*/1},
          {comm::P2POp::Kind::Send, on_device(message(comm.rank(), 2, numel + 5)), prev, /*tag=*/2},
      });
      ASSERT_EQ(works.size(), 4u);
      for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
      EXPECT_TRUE(same(from_prev, message(prev, 1, numel))) << numel;
      EXPECT_TRUE(same(from_next, message(next, 2, numel + 5))) << numel;
      const auto stats = comm.stats();
      EXPECT_EQ(stats.ops.at("send").calls, 2u);
      EXPECT_EQ(stats.ops.at("recv").calls, 2u);
      EXPECT_EQ(stats.ops.at("recv").bytes, static_cast<std::uint64_t>(2 * numel + 5) * sizeof(float));
    }
    EXPECT_TRUE(comm.batch_isend_irecv({}).empty());
  });
}

// Many operations in flight at once, of several kinds, waited in reverse order; a blocking call
// issued behind them is ordered after them on every rank.
TEST_P(CommunicatorConformance, AsyncOperationsOverlapAndComplete) {
  const int n = this->n();
  world([&](Communicator& comm) {
    const int r = comm.rank();
    constexpr int kOutstanding = 8;
    std::vector<at::Tensor> tensors;
    std::vector<WorkPtr> works;
    for (int k = 0; k < kOutstanding; ++k) {
      // From 2 KB to 280 KB: both of mpi's all-reduce algorithms.
      tensors.push_back(on_device(at::full({257 + 5000 * k}, static_cast<double>(k + r), at::kDouble)));
      works.push_back(
          comm.allreduce(tensors.back(), k % 2 ? ReduceOp::Avg : ReduceOp::Sum, /*async_op=*/true));
    }
    at::Tensor gathered = on_device(at::zeros({n * 3}, at::kLong));
    auto gather = comm.allgather(on_device(at::full({3}, std::int64_t{r})), gathered, /*async_op=*/true);
    at::Tensor broadcast = on_device(at::full({5}, r, at::kInt));
    auto bcast = comm.broadcast(broadcast, n - 1, /*async_op=*/true);
    at::Tensor scattered = on_device(at::zeros({2}, at::kFloat));
    auto scatter =
        comm.reduce_scatter(on_device(at::full({2 * n}, r + 1.0f)), scattered, ReduceOp::Sum, true);
    auto barrier = comm.barrier(/*async_op=*/true);
    at::Tensor blocking = on_device(at::ones({10}));
    comm.allreduce(blocking);
    EXPECT_TRUE(same(blocking, at::full({10}, static_cast<float>(n))));
    for (int k = kOutstanding - 1; k >= 0; --k) {
      works[k]->wait();
      EXPECT_TRUE(works[k]->completed()) << k;
      const double sum = n * k + n * (n - 1) / 2.0;
      const auto numel = tensors[k].numel();
      EXPECT_TRUE(same(tensors[k], at::full({numel}, k % 2 ? sum / n : sum, at::kDouble))) << k;
    }
    for (const WorkPtr& work : {barrier, scatter, bcast, gather}) {
      work->wait();
      EXPECT_TRUE(work->completed());
    }
    EXPECT_TRUE(same(gathered, at::arange(n, at::kLong).repeat_interleave(3)));
    EXPECT_TRUE(same(broadcast, at::full({5}, n - 1, at::kInt)));
    EXPECT_TRUE(same(scattered, at::full({2}, n * (n + 1) / 2.0f)));
  });
}

// completed() alone, polled without wait(), sees a collective and a point-to-point transfer finish.
TEST_P(CommunicatorConformance, CompletedTurnsTrueWithoutWait) {
  const int n = this->n();
  world([&](Communicator& comm) {
    at::Tensor t = on_device(at::ones({64}));
    EXPECT_TRUE(completes_without_wait(comm.allreduce(t, ReduceOp::Sum, /*async_op=*/true)));
    EXPECT_TRUE(same(t, at::full({64}, static_cast<float>(n))));
    if (n == 1 || comm.rank() > 1) return;
    at::Tensor p2p = on_device(at::full({16}, static_cast<float>(comm.rank())));
    WorkPtr work = comm.rank() == 0 ? comm.send(p2p, 1, 0, true) : comm.recv(p2p, 0, 0, true);
    EXPECT_TRUE(completes_without_wait(work));
    EXPECT_TRUE(same(p2p, at::zeros({16})));
  });
}

TEST_P(CommunicatorConformance, BarrierBlockingAndAsync) {
  world([&](Communicator& comm) {
    comm.barrier();
    auto work = comm.barrier(/*async_op=*/true);
    work->wait();
    EXPECT_TRUE(work->completed());
  });
}

float sum_of(const std::vector<int>& ranks) {
  float sum = 0;
  for (int r : ranks) sum += static_cast<float>(r);
  return sum;
}

// Even and odd ranks: each rank belongs to one group, numbered by its position in the list.
TEST_P(CommunicatorConformance, SplitFormsIndependentSubgroups) {
  const int n = this->n();
  world([&](Communicator& comm) {
    std::vector<int> evens, odds;
    for (int r = 0; r < n; ++r) (r % 2 ? odds : evens).push_back(r);
    auto even = comm.split(evens);
    std::unique_ptr<Communicator> odd = odds.empty() ? nullptr : comm.split(odds);
    const bool is_odd = comm.rank() % 2 == 1;
    Communicator* mine = is_odd ? odd.get() : even.get();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ((is_odd ? even : odd), nullptr);
    const auto& members = is_odd ? odds : evens;
    EXPECT_EQ(mine->size(), static_cast<int>(members.size()));
    EXPECT_EQ(mine->rank(), comm.rank() / 2);
    at::Tensor t = on_device(at::full({10}, static_cast<float>(comm.rank())));
    mine->allreduce(t);
    EXPECT_TRUE(same(t, at::full({10}, sum_of(members))));
    // The parent still works while its subgroups exist.
    at::Tensor all = on_device(at::ones({3}));
    comm.allreduce(all);
    EXPECT_TRUE(same(all, at::full({3}, static_cast<float>(n))));
    // A subgroup splits again, into a singleton of its first member.
    auto first_only = mine->split({0});
    EXPECT_EQ(first_only != nullptr, mine->rank() == 0);
    if (first_only) {
      EXPECT_EQ(first_only->size(), 1);
      EXPECT_EQ(first_only->rank(), 0);
    }
  });
}

TEST_P(CommunicatorConformance, SplitOfASplitAndASingleton) {
  const int n = this->n();
  world([&](Communicator& comm) {
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    auto copy = comm.split(all);
    ASSERT_NE(copy, nullptr);
    EXPECT_EQ(copy->size(), n);
    EXPECT_EQ(copy->rank(), comm.rank());
    auto last = copy->split({n - 1});
    EXPECT_EQ(last != nullptr, comm.rank() == n - 1);
    if (last) {
      EXPECT_EQ(last->size(), 1);
      at::Tensor t = on_device(at::full({4}, 3.0f));
      last->allreduce(t);
      EXPECT_TRUE(same(t, at::full({4}, 3.0f)));
    }
    at::Tensor t = on_device(at::ones({8}));
    copy->allreduce(t, ReduceOp::Sum, /*async_op=*/true)->wait();
    EXPECT_TRUE(same(t, at::full({8}, static_cast<float>(n))));
  });
}

}  // namespace
}  // namespace dtrain::testing
