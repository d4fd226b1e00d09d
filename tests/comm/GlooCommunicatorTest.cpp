// The gloo backend, really communicating: ranks run as threads of this process and meet through
// a TCPStore the test hosts (as torchrun's agent does) or that rank 0 hosts. Every collective is
// checked against a closed form for world sizes 1..4, several sizes and dtypes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/StoreServer.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

BackendOptions gloo_options(std::chrono::milliseconds timeout = 10s) {
  BackendOptions options;
  options.name = "gloo";
  options.timeout = timeout;
  return options;
}

RendezvousInfo rank_info(int rank, int size, int port, bool agent_store,
                         std::chrono::milliseconds timeout = 10s) {
  RendezvousInfo info;
  info.rank = rank;
  info.world_size = size;
  info.local_rank = rank;
  info.local_world_size = size;
  info.master_addr = "127.0.0.1";
  info.master_port = port;
  info.agent_store = agent_store;
  info.timeout = timeout;
  return info;
}

// A store hosted by the test, like torchrun's agent store, on a free port.
std::unique_ptr<StoreServer> host_store() {
  return std::make_unique<StoreServer>("127.0.0.1", 0, std::chrono::seconds(10));
}

// Runs fn(communicator) on `size` ranks, one thread each; rethrows the first rank's failure.
void run_world(int size, const std::function<void(Communicator&)>& fn,
               const BackendOptions& options = gloo_options()) {
  auto store = host_store();
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect(options, rank_info(r, size, store->port(), /*agent_store=*/true));
        fn(*comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// What rank r contributes: element i holds r + 1 + i % 64, small enough that float16 sums stay exact.
at::Tensor contributions(int r, int64_t numel, at::ScalarType dtype) {
  return (torch::arange(numel, torch::kFloat64).remainder(64) + (r + 1)).to(dtype);
}

// The closed form of `op` over ranks 0..n-1 contributing base + r + 1 (see contributions()).
at::Tensor reduced(const at::Tensor& base, ReduceOp op, int n) {
  switch (op) {
    case ReduceOp::Sum:
      return base * n + n * (n + 1) / 2.0;
    case ReduceOp::Max:
      return base + n;
    case ReduceOp::Min:
      return base + 1;
    case ReduceOp::Avg:
      return base + (n + 1) / 2.0;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown reduce op");
}

const std::vector<at::ScalarType> kDtypes{torch::kFloat32, torch::kFloat64, torch::kInt32, torch::kInt64,
                                          torch::kFloat16};
const std::vector<int64_t> kSizes{1, 7, 1000};

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, AllreduceSumMaxMinAvgMatchClosedForm) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    for (auto dtype : kDtypes) {
      for (int64_t numel : kSizes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
          if (op == ReduceOp::Avg && !at::isFloatingType(dtype)) continue;
          at::Tensor t = contributions(comm.rank(), numel, dtype);
          comm.allreduce(t, op);
          at::Tensor base = torch::arange(numel, torch::kFloat64).remainder(64);
          const at::Tensor expected = reduced(base, op, n);
          EXPECT_TRUE(torch::equal(t.to(torch::kFloat64), expected))
              << "rank " << comm.rank() << " " << to_string(op) << " " << c10::toString(dtype)
              << " n=" << numel;
        }
      }
    }
  });
}

TEST_P(GlooWorld, AllreduceAvgOfIntegersIsRefused) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "a single rank reduces nothing";
  run_world(n, [](Communicator& comm) {
    at::Tensor t = torch::ones({4}, torch::kInt32);
    try {
      comm.allreduce(t, ReduceOp::Avg);
      ADD_FAILURE() << "avg of int32 was accepted";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("floating-point"), std::string::npos) << e.what();
      EXPECT_EQ(e.rank(), comm.rank());
    }
    // The refusal happens before any communication: the world still works.
    at::Tensor ok = torch::ones({4});
    comm.allreduce(ok);
    EXPECT_TRUE(torch::equal(ok, torch::full({4}, static_cast<float>(comm.size()))));
  });
}

TEST_P(GlooWorld, AllgatherFillsTheFlatOutputInRankOrder) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kInt32, torch::kInt64, torch::kFloat16,
                       torch::kBFloat16}) {
      for (int64_t numel : kSizes) {
        at::Tensor input = contributions(comm.rank(), numel, dtype);
        at::Tensor output = torch::empty({n, numel}, dtype);  // shaped: the flat layout is what counts
        comm.allgather(input, output);
        for (int j = 0; j < n; ++j) {
          EXPECT_TRUE(torch::equal(output[j], contributions(j, numel, dtype)))
              << "rank " << comm.rank() << " chunk " << j << " " << c10::toString(dtype);
        }
      }
    }
  });
}

TEST_P(GlooWorld, BroadcastFromEveryRoot) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    for (auto dtype : {torch::kFloat32, torch::kInt64, torch::kBFloat16}) {
      for (int root = 0; root < n; ++root) {
        at::Tensor t = contributions(comm.rank(), 33, dtype).view({3, 11});
        comm.broadcast(t, root);
        EXPECT_TRUE(torch::equal(t, contributions(root, 33, dtype).view({3, 11})));
      }
    }
  });
}

TEST_P(GlooWorld, ReduceScatterReducesChunkOfThisRank) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    for (auto dtype : kDtypes) {
      for (int64_t chunk : kSizes) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
          if (op == ReduceOp::Avg && !at::isFloatingType(dtype)) continue;
          at::Tensor input = contributions(comm.rank(), n * chunk, dtype);
          at::Tensor output = torch::empty({chunk}, dtype);
          comm.reduce_scatter(input, output, op);
          // Element k of the input holds r+1+k%64; this rank's chunk starts at k = rank*chunk.
          at::Tensor base =
              torch::arange(comm.rank() * chunk, (comm.rank() + 1) * chunk, torch::kFloat64).remainder(64);
          const at::Tensor expected = reduced(base, op, n);
          EXPECT_TRUE(torch::equal(output.to(torch::kFloat64), expected))
              << "rank " << comm.rank() << " " << to_string(op) << " " << c10::toString(dtype)
              << " chunk=" << chunk;
        }
      }
    }
  });
}

TEST_P(GlooWorld, AlltoallTransposesChunks) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    for (auto dtype : {torch::kFloat32, torch::kInt32, torch::kFloat16}) {
      for (int64_t chunk : {int64_t{1}, int64_t{50}}) {
        // Chunk j of rank r's input holds 10*r + j: it goes to rank j.
        at::Tensor input = torch::empty({n, chunk}, dtype);
        for (int j = 0; j < n; ++j) input[j].fill_(10 * comm.rank() + j);
        at::Tensor output = torch::empty({n, chunk}, dtype);
        comm.alltoall(input, output);
        for (int i = 0; i < n; ++i) {
          EXPECT_TRUE(torch::equal(output[i], torch::full({chunk}, 10 * i + comm.rank(), dtype)));
        }
      }
    }
  });
}

TEST_P(GlooWorld, SendRecvAroundTheRingWithTags) {
  const int n = GetParam();
  if (n == 1) GTEST_SKIP() << "no peer to send to";
  run_world(n, [n](Communicator& comm) {
    const int next = (comm.rank() + 1) % n;
    const int prev = (comm.rank() + n - 1) % n;
    // Two messages told apart by their tags; each recv names the tag of the message it wants.
    auto s1 = comm.send(torch::full({5}, 100.0f + comm.rank()), next, /*tag=*/1, /*async_op=*/true);
    auto s2 = comm.send(torch::full({7}, 200.0f + comm.rank()), next, /*tag=*/2, /*async_op=*/true);
    at::Tensor first = torch::empty({5});
    at::Tensor second = torch::empty({7});
    auto r1 = comm.recv(first, prev, /*tag=*/1, /*async_op=*/true);
    auto r2 = comm.recv(second, prev, /*tag=*/2, /*async_op=*/true);
    r2->wait();
    r1->wait();
    s1->wait();
    s2->wait();
    EXPECT_TRUE(torch::equal(first, torch::full({5}, 100.0f + prev)));
    EXPECT_TRUE(torch::equal(second, torch::full({7}, 200.0f + prev)));
  });
}

TEST_P(GlooWorld, AsyncOperationsOverlapAndComplete) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    constexpr int kOutstanding = 6;
    std::vector<at::Tensor> tensors;
    std::vector<WorkPtr> works;
    for (int k = 0; k < kOutstanding; ++k) {
      tensors.push_back(torch::full({257}, static_cast<double>(k + comm.rank()), torch::kFloat64));
      works.push_back(
          comm.allreduce(tensors.back(), k % 2 ? ReduceOp::Avg : ReduceOp::Sum, /*async_op=*/true));
    }
    at::Tensor gathered = torch::empty({n * 3}, torch::kInt64);
    auto gather = comm.allgather(torch::full({3}, int64_t{comm.rank()}), gathered, /*async_op=*/true);
    auto barrier = comm.barrier(/*async_op=*/true);
    for (int k = kOutstanding - 1; k >= 0; --k) works[k]->wait();  // any order
    gather->wait();
    barrier->wait();
    for (int k = 0; k < kOutstanding; ++k) {
      const double sum = n * k + n * (n - 1) / 2.0;
      EXPECT_TRUE(torch::equal(tensors[k], torch::full({257}, k % 2 ? sum / n : sum, torch::kFloat64))) << k;
      EXPECT_TRUE(works[k]->completed());
    }
    EXPECT_TRUE(torch::equal(gathered, torch::arange(n).repeat_interleave(3)));
  });
}

TEST(GlooCommunicator, PointToPointCompletedTurnsTrueWithoutWait) {
  run_world(2, [](Communicator& comm) {
    at::Tensor t = torch::full({16}, static_cast<float>(comm.rank()));
    WorkPtr work = comm.rank() == 0 ? comm.send(t, 1, 0, true) : comm.recv(t, 0, 0, true);
    const auto deadline = Clock::now() + 10s;
    while (!work->completed() && Clock::now() < deadline) std::this_thread::yield();
    EXPECT_TRUE(work->completed());
    EXPECT_TRUE(torch::equal(t, torch::zeros({16})));
  });
}

TEST_P(GlooWorld, SplitFormsIndependentSubgroups) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    std::vector<int> evens, odds;
    for (int r = 0; r < n; ++r) (r % 2 ? odds : evens).push_back(r);
    auto even = comm.split(evens);
    std::unique_ptr<Communicator> odd = odds.empty() ? nullptr : comm.split(odds);
    Communicator* mine = comm.rank() % 2 ? odd.get() : even.get();
    ASSERT_NE(mine, nullptr);
    EXPECT_EQ((comm.rank() % 2 ? even : odd), nullptr);
    const auto& members = comm.rank() % 2 ? odds : evens;
    EXPECT_EQ(mine->size(), static_cast<int>(members.size()));
    EXPECT_EQ(mine->rank(), comm.rank() / 2);
    at::Tensor t = torch::full({10}, static_cast<float>(comm.rank()));
    mine->allreduce(t);
    float expected = 0;
    for (int r : members) expected += r;
    EXPECT_TRUE(torch::equal(t, torch::full({10}, expected)));
    // The parent still works after splitting, and a subgroup splits again.
    at::Tensor all = torch::ones({3});
    comm.allreduce(all);
    EXPECT_TRUE(torch::equal(all, torch::full({3}, static_cast<float>(n))));
    auto first_only = mine->split({0});
    EXPECT_EQ(first_only != nullptr, mine->rank() == 0);
    if (first_only) {
      EXPECT_EQ(first_only->size(), 1);
    }
  });
}

TEST_P(GlooWorld, StatsCountCallsAndBytes) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    comm.reset_stats();
    at::Tensor t = torch::ones({1024});  // 4 KiB
    for (int k = 0; k < 3; ++k) comm.allreduce(t);
    at::Tensor out = torch::empty({n * 1024});
    comm.allgather(t, out);
    const CommStats stats = comm.stats();
    if (n == 1) {
      EXPECT_EQ(stats.total().calls, 0u) << "a single rank communicates nothing";
      return;
    }
    EXPECT_EQ(stats.ops.at("allreduce").calls, 3u);
    EXPECT_EQ(stats.ops.at("allreduce").bytes, 3u * 4096u);
    EXPECT_EQ(stats.ops.at("allgather").calls, 1u);
    EXPECT_EQ(stats.ops.at("allgather").bytes, static_cast<std::uint64_t>(n) * 4096u);
    EXPECT_GT(stats.ops.at("allreduce").wait_seconds, 0.0);
  });
}

TEST_P(GlooWorld, EmptyTensorsAreNoOps) {
  const int n = GetParam();
  run_world(n, [n](Communicator& comm) {
    at::Tensor empty = torch::empty({0});
    comm.allreduce(empty);
    comm.broadcast(empty, 0);
    at::Tensor out = torch::empty({0});
    comm.allgather(empty, out);
    comm.reduce_scatter(empty, out);
    // A real collective afterwards proves no rank was left waiting in one of the above.
    at::Tensor t = torch::ones({2});
    comm.allreduce(t);
    EXPECT_TRUE(torch::equal(t, torch::full({2}, static_cast<float>(n))));
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooWorld, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(GlooCommunicator, RankZeroHostsTheStore) {
  const int port = free_port();
  constexpr int n = 3;
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect(gloo_options(), rank_info(r, n, port, /*agent_store=*/false));
        EXPECT_EQ(comm->backend(), "gloo");
        at::Tensor t = torch::full({4}, static_cast<float>(r));
        comm->allreduce(t, ReduceOp::Max);
        EXPECT_TRUE(torch::equal(t, torch::full({4}, n - 1.0f)));
        // Rank 0 must keep the store up until everyone is done with it.
        comm->barrier();
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(GlooCommunicator, ConnectingTwiceToOneStoreGivesFreshGroups) {
  auto store = host_store();
  constexpr int n = 2;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (int run = 0; run < 2; ++run) {
        auto comm = connect(gloo_options(), rank_info(r, n, store->port(), true));
        at::Tensor t = torch::full({3}, static_cast<float>(run + r));
        comm->allreduce(t);
        EXPECT_TRUE(torch::equal(t, torch::full({3}, 2.0f * run + 1)));
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicator, MissingRankFailsTheRendezvousWithinTheTimeout) {
  auto store = host_store();
  const auto start = Clock::now();
  try {
    // Ranks 1 and 2 of 3 never start.
    connect(gloo_options(), rank_info(0, 3, store->port(), true, 1500ms));
    FAIL() << "the rendezvous succeeded without ranks 1 and 2";
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rendezvous"), std::string::npos) << what;
    EXPECT_NE(what.find("ranks 1, 2"), std::string::npos) << what;
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(GlooCommunicator, UnreachableStoreFailsWithinTheTimeout) {
  const int port = free_port();  // nobody listens there
  const auto start = Clock::now();
  try {
    connect(gloo_options(), rank_info(1, 2, port, /*agent_store=*/false, 1000ms));
    FAIL() << "connected to a store that does not exist";
  } catch (const CommError& e) {
    EXPECT_EQ(e.op(), "rendezvous (gloo)");
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(GlooCommunicator, PeerThatLeavesFailsTheCollectiveWithoutHanging) {
  auto store = host_store();
  std::promise<void> left;
  std::thread leaver([&] {
    auto comm = connect(gloo_options(3s), rank_info(1, 2, store->port(), true));
    comm.reset();  // closes its connections, as a crashed process would
    left.set_value();
  });
  auto comm = connect(gloo_options(3s), rank_info(0, 2, store->port(), true));
  left.get_future().wait();
  const auto start = Clock::now();
  try {
    at::Tensor t = torch::ones({1024});
    comm->allreduce(t);
    FAIL() << "allreduce succeeded without its peer";
  } catch (const CommError& e) {
    EXPECT_EQ(e.rank(), 0);
    EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
  leaver.join();
}

TEST(GlooCommunicator, RejectsNonPositiveThreadCount) {
  BackendOptions options = gloo_options();
  options.gloo_threads = 0;
  EXPECT_THROW(connect(options, rank_info(0, 2, 1, true)), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::comm
