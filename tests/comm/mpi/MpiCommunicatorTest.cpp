// The mpi backend under mpirun: each process is one rank and runs every test. The Communicator
// contract runs here at mpirun's world size (CommunicatorConformance.h); below it, what only mpi
// has: a receive that a shorter message fills, a receive that times out and is withdrawn, a
// rendezvous that disagrees with mpirun. Built as dtrain_comm_mpi_tests and run by CTest at world
// sizes 1 to 4 (comm.mpi.np1..4), e.g.
//   mpirun -n 4 --oversubscribe build/tests/comm/dtrain_comm_mpi_tests
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/CommunicatorConformance.h"
#include "dtrain/comm/Communicator.h"
#include "dtrain/comm/mpi/MpiAllreduce.h"
#include "dtrain/comm/mpi/MpiCommunicator.h"
#include "dtrain/comm/mpi/MpiWireBytes.h"
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

// Recursive doubling (dtrain's and OpenMPI's): log2 p rounds of the whole buffer on the largest
// power of two p <= n; the first 2(n - p) ranks pair up, the even one handing its buffer to the odd
// one, which takes part and sends the result back.
std::uint64_t recursive_doubling_bytes(std::uint64_t bytes, int rank, int n) {
  int p = 1, rounds = 0;
  while (p * 2 <= n) p *= 2, ++rounds;
  if (rank < 2 * (n - p)) return rank % 2 == 0 ? bytes : (rounds + 1) * bytes;
  return rounds * bytes;
}

// The ring (dtrain's and OpenMPI's): n blocks, the first count % n one element longer; the
// reduce-scatter sends every block but rank + 1, the all-gather every block but rank + 2.
std::uint64_t ring_bytes(const WireCall& call, int rank, int n) {
  auto block = [&](int b) { return call.numel / n + ((b % n) < call.numel % n ? 1 : 0); };
  return (2 * call.numel - block(rank + 1) - block(rank + 2)) * call.element_size;
}

// OpenMPI 4.1.4's tuned MPI_Allreduce for 256 KiB (Rabenseifner at n <= 7): worked out by hand
// from coll_base_allreduce.c. n = 3: rank 0 sends its right half to rank 1, half of the rest to
// rank 2 in the reduce-scatter, that back in the all-gather and the whole result to rank 1; rank 1
// sends its left half, then its reduced right half; rank 2 a half and a half back.
std::uint64_t rabenseifner_256k(int rank, int n) {
  switch (n) {
    case 2:
      return 262144;
    case 3:
      return rank == 0 ? 655360 : 262144;
    case 4:
      return 393216;
  }
  ADD_FAILURE() << "no hand-worked figure for " << n << " ranks";
  return 0;
}

// What the mpi backend's algorithms make `rank` of n send (Note [OpenMPI's algorithms]), for the
// conformance suite's calls at n = 2..4.
std::uint64_t mpi_expected_wire_bytes(const WireCall& call, int rank, int n) {
  const std::uint64_t bytes = call.bytes();
  const auto size = static_cast<std::uint64_t>(n);
  switch (call.op) {
    case CommOp::Allreduce:
      if (call.async_op) {  // dtrain's own: recursive doubling below 64 KiB, else the ring
        return bytes < 65536 ? recursive_doubling_bytes(bytes, rank, n) : ring_bytes(call, rank, n);
      }
      // OpenMPI's fixed rules: n < 4: recursive doubling below 4096 B, the ring below 8192 B,
      // Rabenseifner from 256 KiB; n = 4: recursive doubling below 8192 B, then Rabenseifner.
      if (bytes >= 262144) return rabenseifner_256k(rank, n);
      if (n < 4 && bytes >= 4096 && bytes < 8192) return ring_bytes(call, rank, n);
      return recursive_doubling_bytes(bytes, rank, n);
    case CommOp::Broadcast:  // libnbc, linear for n <= 4: the root sends to every rank
      return rank == call.root ? (size - 1) * bytes : 0;
    case CommOp::Allgather:  // libnbc, linear
      return (size - 1) * bytes;
    case CommOp::ReduceScatter:
      if (!call.async_op) {
        // The suite's blocking call has 4 KiB blocks, for which tuned's rules pick recursive
        // halving on 3 and 4 ranks (and on 2 an exchange of the peer's block). Worked by hand:
        // n = 3 folds rank 0 into rank 1 (rank 0 sends all 3 blocks); ranks 1 and 2 then swap
        // halves, rank 1 sending 1 block and rank 2 the 2 blocks of ranks 0 and 1, and rank 1
        // sends rank 0 its block. n = 4: 2 blocks, then 1.
        const std::uint64_t block = bytes / size;
        TORCH_CHECK(block == 4096, "hand-worked for 4 KiB blocks only");
        if (n == 2) return block;
        if (n == 3) return rank == 0 ? 3 * block : 2 * block;
        if (n == 4) return 3 * block;
      }
      // libnbc: a reduce of the whole input to 0, which scatters.
      return rank == 0 ? (size - 1) * bytes / size : bytes;
    case CommOp::Alltoall:  // libnbc, linear
      return (size - 1) * bytes / size;
    case CommOp::Send:
      return bytes;
    default:
      return 0;  // recv, and the barrier's empty messages
  }
}

// Evaluated when gtest registers the tests, after main() connected: the world size is mpirun's.
std::vector<ConformanceWorld> mpi_worlds() {
  ConformanceWorld world;
  world.backend = "mpi";
  world.size = g_world->size();
  // MPI reduces every dtype dtrain moves (float16 and bfloat16 through its own operations).
  world.reduced_dtypes = dtrain::testing::kMovedDtypes;
  world.run = [](const dtrain::testing::RankFn& fn) { fn(*g_world); };
  world.expected_wire_bytes = [n = world.size](const WireCall& call, int rank) {
    return mpi_expected_wire_bytes(call, rank, n);
  };
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

// CommStats counts an all-reduce's bytes without building its steps; the count must be the steps'.
TEST(MpiCommunicator, AllreduceByteCountsEqualWhatTheStepsSend) {
  using namespace dtrain::comm::mpi;
  for (int size = 1; size <= 9; ++size) {
    for (int rank = 0; rank < size; ++rank) {
      for (const std::size_t count : {0, 1, 2, 3, 7, 8, 1000, 1001, 16384, 65537}) {
        EXPECT_EQ(recursive_doubling_sent(rank, size, count),
                  bytes_sent(recursive_doubling_steps(rank, size, count), 1))
            << "rank " << rank << " of " << size << ", " << count;
        EXPECT_EQ(ring_sent(rank, size, count), bytes_sent(ring_steps(rank, size, count), 1))
            << "rank " << rank << " of " << size << ", " << count;
        for (const std::size_t element_size : {1, 2, 4}) {
          EXPECT_EQ(allreduce_sent(rank, size, count, element_size),
                    bytes_sent(allreduce_steps(rank, size, count, element_size), 1));
        }
      }
    }
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

// The pipeline keeps its transfers moving by polling them between layers (Note [Transfers kept
// moving between layers]): a poll must advance a posted send, also where a message above the
// eager limit moves only inside its sender's MPI calls (CTest runs these tests without Open MPI's
// single-copy mechanism). Rank 0 posts a 1 MiB send and from then on only polls it.
TEST(MpiCommunicator, PollingAPostedSendAloneMovesItToItsReceiver) {
  const int n = world().size();
  if (n == 1) GTEST_SKIP() << "no peer at world size 1";
  const auto expected = at::arange(256 * 1024, at::kFloat);
  if (world().rank() == 0) {
    auto work = world().send(expected, 1, /*tag=*/11, /*async_op=*/true);
    const auto give_up = util::Clock::now() + world().timeout();
    bool done = false;
    while (!(done = work->poll()) && util::Clock::now() < give_up) {
    }
    EXPECT_TRUE(done) << "the send was polled for the communicator's timeout and did not finish";
    if (!done) work->wait();
  } else if (world().rank() == 1) {
    auto received = at::zeros_like(expected);
    world().recv(received, 0, /*tag=*/11);
    EXPECT_TRUE(at::equal(received, expected));
  }
  world().barrier();
}

// Note [Open MPI's send pipeline depth]: MPI, initialised by dtrain here, runs at the depth the
// environment names, 32 unless it named one before.
TEST(MpiCommunicator, OpenMpiSendPipelineDepthIsTheEnvironmentsOrThirtyTwo) {
  const char* depth = std::getenv("OMPI_MCA_pml_ob1_send_pipeline_depth");
  ASSERT_NE(depth, nullptr) << "dtrain did not set the send pipeline depth before initialising MPI";
  int provided = 0;
  ASSERT_EQ(MPI_T_init_thread(MPI_THREAD_SERIALIZED, &provided), MPI_SUCCESS);
  int count = 0;
  MPI_T_cvar_get_num(&count);
  int value = -1;
  for (int index = 0; index < count; ++index) {
    char name[256];
    int name_length = sizeof(name);
    int verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype datatype = MPI_DATATYPE_NULL;
    MPI_T_enum values = MPI_T_ENUM_NULL;
    if (MPI_T_cvar_get_info(index, name, &name_length, &verbosity, &datatype, &values, nullptr, nullptr,
                            &bind, &scope) != MPI_SUCCESS ||
        std::string(name) != "pml_ob1_send_pipeline_depth") {
      continue;
    }
    MPI_T_cvar_handle handle;
    int elements = 0;
    ASSERT_EQ(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &elements), MPI_SUCCESS);
    MPI_T_cvar_read(handle, &value);
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  EXPECT_EQ(value, std::atoi(depth));
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
