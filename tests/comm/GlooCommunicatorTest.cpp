// The gloo backend, really communicating: ranks run as threads of this process and meet through
// a TCPStore the test hosts (as torchrun's agent does) or that rank 0 hosts. The Communicator
// contract runs here for world sizes 1..4 (CommunicatorConformance.h); below it, what only gloo
// has: its store, its rendezvous failures, peers that leave, its thread count.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "comm/CommunicatorConformance.h"
#include "dtrain/comm/Backend.h"
#include "dtrain/comm/gloo/GlooCollectives.h"
#include "dtrain/comm/gloo/GlooWireBytes.h"
#include "dtrain/comm/store/StoreServer.h"
#include "dtrain/util/Clock.h"
#include "support/ThreadWorld.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using dtrain::testing::CommunicatorConformance;
using dtrain::testing::ConformanceWorld;
using util::Clock;

// Gloo reduces these, bfloat16 through dtrain's exchange (Note [bfloat16 on Gloo]); int16 and
// bool it only moves.
const std::vector<at::ScalarType> kGlooReduced{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                               at::kChar,  at::kByte,   at::kInt,  at::kLong};

// What Gloo's algorithms make `rank` of n send (Note [Gloo's algorithms]), for the conformance
// suite's calls (all below Gloo's 1 MiB segment size).
std::uint64_t gloo_expected_wire_bytes(const WireCall& call, int rank, int n) {
  const std::uint64_t bytes = call.bytes();
  const auto size = static_cast<std::uint64_t>(n);
  switch (call.op) {
    case CommOp::Allreduce: {
      // The ring cuts the buffer into 2n segments of ceil(bytes / 2n) rounded up to whole
      // elements; chunk c is segments 2c and 2c + 1, clipped to the buffer. The reduce-scatter
      // sends every chunk but the rank's own, the all-gather every chunk but the previous rank's.
      const std::uint64_t element = call.element_size;
      const std::uint64_t segment = ((bytes + 2 * size - 1) / (2 * size) + element - 1) / element * element;
      auto chunk = [&](std::uint64_t c) {
        return std::min(bytes, (c + 1) * 2 * segment) - std::min(bytes, c * 2 * segment);
      };
      return 2 * bytes - chunk(rank) - chunk((rank + n - 1) % n);
    }
    case CommOp::Broadcast: {
      // The binomial tree's children of each virtual rank (rank - root) mod n, for n = 2, 3, 4.
      static const std::vector<std::vector<std::uint64_t>> children{{}, {0}, {1, 0}, {2, 0, 0}, {2, 1, 0, 0}};
      return children.at(n).at((rank - call.root + n) % n) * bytes;
    }
    case CommOp::Allgather:
      return (size - 1) * bytes;
    case CommOp::ReduceScatter:  // the ring: n-1 steps of one chunk
    case CommOp::Alltoall:
      return (size - 1) * bytes / size;
    case CommOp::Send:
      return bytes;
    default:
      return 0;  // recv, and the barrier's empty messages
  }
}

std::vector<ConformanceWorld> gloo_worlds() {
  std::vector<ConformanceWorld> worlds;
  for (int n = 1; n <= 4; ++n) {
    ConformanceWorld world;
    world.backend = "gloo";
    world.size = n;
    world.reduced_dtypes = kGlooReduced;
    world.expected_wire_bytes = [n](const WireCall& call, int rank) {
      return gloo_expected_wire_bytes(call, rank, n);
    };
    world.run = [n](const dtrain::testing::RankFn& fn) {
      dtrain::testing::WorldOptions options;
      options.timeout = 30s;  // a rank that fails and skips a collective fails the others after it
      dtrain::testing::run_world(
          n, [&](const CommunicatorPtr& comm) { fn(*comm); }, options);
    };
    worlds.push_back(world);
  }
  return worlds;
}

INSTANTIATE_TEST_SUITE_P(Gloo, CommunicatorConformance, ::testing::ValuesIn(gloo_worlds()),
                         dtrain::testing::conformance_name);

BackendOptions gloo_options(std::chrono::milliseconds timeout = 10s) {
  BackendOptions options;
  options.name = "gloo";
  options.timeout = timeout;
  return options;
}

RendezvousInfo rank_info(int rank, int size, int port, bool agent_store,
                         std::chrono::milliseconds timeout = 10s) {
  RendezvousInfo info = dtrain::testing::thread_rank_info(rank, size, port, timeout);
  info.agent_store = agent_store;
  return info;
}

// A store hosted by the test, like torchrun's agent store, on a free port.
std::unique_ptr<StoreServer> host_store() {
  return std::make_unique<StoreServer>("127.0.0.1", 0, std::chrono::seconds(10));
}

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
  dtrain::testing::run_threads(n, [&](int r) {
    auto comm = connect(gloo_options(), rank_info(r, n, port, /*agent_store=*/false));
    EXPECT_EQ(comm->backend(), "gloo");
    at::Tensor t = torch::full({4}, static_cast<float>(r));
    comm->allreduce(t, ReduceOp::Max);
    EXPECT_TRUE(torch::equal(t, torch::full({4}, n - 1.0f)));
    // Rank 0 must keep the store up until everyone is done with it.
    comm->barrier();
  });
}

TEST(GlooCommunicator, ConnectingTwiceToOneStoreGivesFreshGroups) {
  auto store = host_store();
  constexpr int n = 2;
  dtrain::testing::run_threads(n, [&](int r) {
    for (int run = 0; run < 2; ++run) {
      auto comm = connect(gloo_options(), rank_info(r, n, store->port(), /*agent_store=*/true));
      at::Tensor t = torch::full({3}, static_cast<float>(run + r));
      comm->allreduce(t);
      EXPECT_TRUE(torch::equal(t, torch::full({3}, 2.0f * run + 1)));
    }
  });
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

// Rank 1 of two leaves; rank 0's `call` (named `op`) must then fail within the timeout with a
// one-line CommError that names it.
void expect_a_peer_that_leaves_fails(const std::string& op, const std::function<void(Communicator&)>& call) {
  SCOPED_TRACE(op);
  auto store = host_store();
  // Rank 1 leaves only once rank 0 has connected too: leaving while rank 0 still completes its
  // side of the mesh would fail rank 0's connect instead of its collective.
  std::promise<void> connected, left;
  auto both_connected = connected.get_future();
  auto gone = left.get_future();
  dtrain::testing::run_threads(2, [&](int r) {
    auto comm = connect(gloo_options(3s), rank_info(r, 2, store->port(), /*agent_store=*/true));
    if (r == 1) {
      // Bounded: when rank 0 failed to connect, the test reports its error instead of hanging.
      ASSERT_EQ(both_connected.wait_for(30s), std::future_status::ready);
      comm.reset();  // closes its connections, as a crashed process would
      left.set_value();
      return;
    }
    connected.set_value();
    ASSERT_EQ(gone.wait_for(30s), std::future_status::ready);
    const auto start = Clock::now();
    try {
      call(*comm);
      ADD_FAILURE() << op << " succeeded without its peer";
    } catch (const CommError& e) {
      EXPECT_EQ(e.rank(), 0);
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 5s);
  });
}

TEST(GlooCommunicator, PeerThatLeavesFailsTheCollectiveWithoutHanging) {
  expect_a_peer_that_leaves_fails("allreduce", [](Communicator& comm) {
    at::Tensor t = torch::ones({1024});
    comm.allreduce(t);
  });
}

// A blocking reduce_scatter or flat allgather runs Gloo directly on c10d's worker thread (Note
// [Gloo's native collectives]): a peer that has left fails it as it does c10d's own collectives.
TEST(GlooCommunicator, PeerThatLeavesFailsABlockingNativeCollectiveWithoutHanging) {
  expect_a_peer_that_leaves_fails("reduce_scatter", [](Communicator& comm) {
    comm.reduce_scatter(torch::ones({2048}), torch::ones({1024}), ReduceOp::Sum, /*async_op=*/false);
  });
  expect_a_peer_that_leaves_fails("allgather", [](Communicator& comm) {
    comm.allgather(torch::ones({1024}), torch::ones({2048}), /*async_op=*/false);
  });
}

// Note [bfloat16 on Gloo]: an alltoall of n equal chunks of 2-byte elements (the buffer padded)
// and an all-gather of one chunk, (n-1) chunks each: half of what the float32 ring sends. (The
// conformance suite checks the sums, maxima, minima and means of bfloat16 against closed forms.)
TEST(GlooCommunicator, BfloatAllreduceSendsTwoByteChunks) {
  for (int n : {2, 3}) {
    dtrain::testing::run_world(n, [&](const CommunicatorPtr& comm) {
      const int r = comm->rank();
      for (std::int64_t numel : {1000, 1001}) {
        for (bool async_op : {false, true}) {
          at::Tensor t = at::full({numel}, r == 0 ? 256.0 : 2.0, at::kBFloat16);
          const auto before = comm->stats();
          comm->allreduce(t, ReduceOp::Sum, async_op)->wait();
          const auto sent = difference(comm->stats(), before).ops.at("allreduce").wire_bytes;
          const std::uint64_t chunk = (numel + n - 1) / n;
          EXPECT_EQ(sent, 2 * (n - 1) * chunk * 2) << "rank " << r << " numel " << numel;
          EXPECT_LT(sent, gloo_ring_allreduce_bytes(r, n, numel * 4, 4)) << "rank " << r;
          EXPECT_TRUE(at::equal(t, at::full({numel}, 256.0 + 2 * (n - 1), at::kBFloat16))) << "rank " << r;
        }
      }
    });
  }
}

// float16 is reduced by c10d's Gloo where this LibTorch's can (its ring: the float16 bytes), and
// otherwise by the exchange bfloat16 takes (gloo_reduces_float16); the sums are exact either way.
TEST(GlooCommunicator, Float16AllreduceIsGloosRingOrTheExchange) {
  for (int n : {2, 3}) {
    dtrain::testing::run_world(n, [&](const CommunicatorPtr& comm) {
      const int r = comm->rank();
      const std::int64_t numel = 1001;
      at::Tensor t = at::full({numel}, r == 0 ? 256.0 : 2.0, at::kHalf);
      const auto before = comm->stats();
      comm->allreduce(t, ReduceOp::Sum)->wait();
      const auto sent = difference(comm->stats(), before).ops.at("allreduce").wire_bytes;
      const std::uint64_t chunk = (numel + n - 1) / n;
      if (gloo_reduces_float16()) {
        EXPECT_EQ(sent, gloo_ring_allreduce_bytes(r, n, numel * 2, 2)) << "rank " << r;
      } else {
        EXPECT_EQ(sent, 2 * (n - 1) * chunk * 2) << "rank " << r;
      }
      EXPECT_TRUE(at::equal(t, at::full({numel}, 256.0 + 2 * (n - 1), at::kHalf))) << "rank " << r;
    });
  }
}

TEST(GlooCommunicator, RejectsNonPositiveThreadCount) {
  BackendOptions options = gloo_options();
  options.gloo_threads = 0;
  EXPECT_THROW(connect(options, rank_info(0, 2, 1, true)), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::comm
