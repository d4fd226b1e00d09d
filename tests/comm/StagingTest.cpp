// Note [Tensors on another device] (Communicator.cpp): a tensor the backend cannot carry where it
// lives is copied to where it can, and what the call writes is copied back when it completes. A
// CPU-only machine has no second device, so these tests use a communicator that stages every
// tensor (stage_everything_: a copy on the CPU): the same code path a GPU tensor takes through gloo
// or mpi, or a host tensor through nccl.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "support/InProcessCommunicator.h"

namespace dtrain::testing {
namespace {

// Stages every tensor, as a GPU tensor is staged through gloo or mpi.
class StagingCommunicator final : public InProcessCommunicator {
 public:
  StagingCommunicator(std::shared_ptr<Hub> hub, int rank) : InProcessCommunicator(std::move(hub), rank) {
    stage_everything_ = true;
  }
};

// Runs fn(rank, communicator) on `n` threads, one rank each.
void run_staged(int n, const std::function<void(int, StagingCommunicator&)>& fn) {
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        StagingCommunicator comm(hub, r);
        fn(r, comm);
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

TEST(Staging, HostMemoryIsWhereGlooAndMpiCarryTensors) {
  auto hub = std::make_shared<Hub>(1);
  InProcessCommunicator comm(hub, 0);
  EXPECT_FALSE(comm.staging_device(torch::ones({3})).has_value());
  const auto elsewhere = comm.staging_device(torch::empty({3}, torch::TensorOptions().device(torch::kMeta)));
  ASSERT_TRUE(elsewhere.has_value());
  EXPECT_TRUE(elsewhere->is_cpu());
  StagingCommunicator staging(hub, 0);
  EXPECT_TRUE(staging.staging_device(torch::ones({3})).has_value());
}

TEST(Staging, AnAsynchronousAllreduceWritesTheCallersTensorWhenWaitedFor) {
  run_staged(3, [](int rank, StagingCommunicator& comm) {
    auto t = torch::full({5}, static_cast<float>(rank + 1));
    auto work = comm.allreduce(t, comm::ReduceOp::Sum, /*async_op=*/true);
    // The backend summed into its copy; the caller's tensor changes only when the call completes.
    EXPECT_TRUE(torch::equal(t, torch::full({5}, static_cast<float>(rank + 1))));
    work->wait();
    EXPECT_TRUE(torch::equal(t, torch::full({5}, 6.0F)));
    work->wait();  // a second wait copies nothing again
    EXPECT_TRUE(torch::equal(t, torch::full({5}, 6.0F)));
  });
}

TEST(Staging, CompletedAndPollCopyBackToo) {
  run_staged(2, [](int rank, StagingCommunicator& comm) {
    auto a = torch::full({4}, static_cast<float>(rank));
    auto b = torch::full({4}, static_cast<float>(10 * rank));
    auto first = comm.allreduce(a, comm::ReduceOp::Sum, true);
    auto second = comm.allreduce(b, comm::ReduceOp::Sum, true);
    EXPECT_TRUE(first->completed());
    EXPECT_TRUE(torch::equal(a, torch::full({4}, 1.0F)));
    EXPECT_TRUE(second->poll());
    EXPECT_TRUE(torch::equal(b, torch::full({4}, 10.0F)));
  });
}

TEST(Staging, BlockingCollectivesGiveWhatUnstagedOnesGive) {
  run_staged(3, [](int rank, StagingCommunicator& comm) {
    const int n = 3;
    // allgather of odd sizes and an integer dtype
    auto in = torch::arange(7, torch::kLong) + 100 * rank;
    auto out = torch::zeros({7 * n}, torch::kLong);
    comm.allgather(in, out);
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(torch::equal(out.narrow(0, 7 * r, 7), torch::arange(7, torch::kLong) + 100 * r));
    EXPECT_TRUE(torch::equal(in, torch::arange(7, torch::kLong) + 100 * rank));  // input untouched
    // reduce_scatter
    auto chunks = torch::arange(2 * n, torch::kDouble) * (rank + 1);
    auto mine = torch::zeros({2}, torch::kDouble);
    comm.reduce_scatter(chunks, mine);
    EXPECT_TRUE(torch::allclose(mine, torch::arange(2 * rank, 2 * rank + 2, torch::kDouble) * 6));
    // broadcast: the root's tensor reaches every rank, and the root's own stays as it was
    auto t = torch::full({3}, static_cast<float>(rank));
    comm.broadcast(t, 1);
    EXPECT_TRUE(torch::equal(t, torch::full({3}, 1.0F)));
  });
}

TEST(Staging, TheCollectiveCheckAgreesThroughStagedTensors) {
  run_staged(2, [](int rank, StagingCommunicator& comm) {
    comm.set_debug(comm::DebugMode::Detail);
    auto t = torch::full({2}, static_cast<float>(rank));
    comm.allreduce(t);
    EXPECT_TRUE(torch::equal(t, torch::full({2}, 1.0F)));
    // A call that differs between ranks is still caught, with the fingerprints staged as well.
    auto u = torch::zeros({rank == 0 ? 2 : 3});
    EXPECT_THROW(comm.allreduce(u), comm::CommError);
  });
}

}  // namespace
}  // namespace dtrain::testing
