// NodeExchange over gloo, through a communicator that notes whether each send and receive came
// inside a batch_isend_irecv: a gossip round is one batch (which nccl issues as one group, Note
// [Grouped point-to-point] in comm/c10d/C10dCommunicator.cpp) and every node hears its in-neighbours.
// Then over the in-order test group (support/InOrderGroup.h), which runs messages as NCCL does.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/parallel/decentralized/Graph.h"
#include "dtrain/parallel/decentralized/NodeExchange.h"
#include "dtrain/parallel/decentralized/NodeLayout.h"
#include "support/InOrderGroup.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using comm::WorkPtr;

// Forwards every call to a gloo communicator and counts batches, and the transfers made inside and
// outside them.
class BatchCounter final : public comm::Communicator {
 public:
  explicit BatchCounter(comm::CommunicatorPtr inner)
      : Communicator(inner->rank(), inner->size(), inner->timeout()), inner_(std::move(inner)) {}
  std::string backend() const override { return inner_->backend(); }
  int batches = 0, inside = 0, outside = 0;

 protected:
  WorkPtr do_allreduce(const at::Tensor& t, comm::ReduceOp op, bool async_op) override {
    return inner_->allreduce(t, op, async_op);
  }
  WorkPtr do_allgather(const at::Tensor& in, const at::Tensor& out, bool async_op) override {
    return inner_->allgather(in, out, async_op);
  }
  WorkPtr do_broadcast(const at::Tensor& t, int root, bool async_op) override {
    return inner_->broadcast(t, root, async_op);
  }
  WorkPtr do_reduce_scatter(const at::Tensor& in, const at::Tensor& out, comm::ReduceOp op,
                            bool async_op) override {
    return inner_->reduce_scatter(in, out, op, async_op);
  }
  WorkPtr do_alltoall(const at::Tensor& in, const at::Tensor& out, bool async_op) override {
    return inner_->alltoall(in, out, async_op);
  }
  WorkPtr do_send(const at::Tensor& t, int dst, int tag, bool async_op) override {
    ++(in_batch_ ? inside : outside);
    return inner_->send(t, dst, tag, async_op);
  }
  WorkPtr do_recv(const at::Tensor& t, int src, int tag, bool async_op) override {
    ++(in_batch_ ? inside : outside);
    return inner_->recv(t, src, tag, async_op);
  }
  WorkPtr do_barrier(bool async_op) override { return inner_->barrier(async_op); }
  void begin_p2p_batch() override {
    EXPECT_FALSE(in_batch_) << "batches do not nest";
    in_batch_ = true;
    ++batches;
  }
  void end_p2p_batch() override { in_batch_ = false; }
  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    return inner_->split(ranks);
  }
  std::uint64_t wire_bytes(const comm::WireCall&) const override { return 0; }

 private:
  comm::CommunicatorPtr inner_;
  bool in_batch_ = false;
};

// Node i's message: 5 elements holding i.
torch::Tensor message_of(int node) {
  return torch::full({5}, static_cast<double>(node), torch::kDouble);
}

void expect_one_batch_per_round(const Graph& graph, int world) {
  const NodeLayout layout(graph.size(), world);
  std::atomic<int> failures{0};
  dtrain::testing::run_world(world, [&](comm::CommunicatorPtr gloo) {
    BatchCounter comm(gloo);
    const NodeExchange exchange(&comm, layout, graph);
    std::vector<torch::Tensor> mine;
    for (int node : layout.local(comm.rank())) mine.push_back(message_of(node));
    const int rounds = 3;
    for (int k = 0; k < rounds; ++k) {
      const auto heard = exchange.exchange(mine);
      for (int node : layout.local(comm.rank())) {
        for (int from : graph.in_neighbours(node)) {
          const auto it = heard.find(from);
          if (it == heard.end() || !torch::equal(it->second, message_of(from))) {
            ADD_FAILURE() << "node " << node << " did not hear node " << from << " in round " << k;
            ++failures;
          }
        }
      }
    }
    EXPECT_EQ(comm.batches, rounds) << "rank " << comm.rank();
    EXPECT_GT(comm.inside, 0) << "rank " << comm.rank();
    EXPECT_EQ(comm.outside, 0) << "rank " << comm.rank() << " sent or received outside a batch";
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(NodeExchange, ARoundOnACycleIsOneBatchOfEveryTransfer) {
  expect_one_batch_per_round(Graph(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}), 2);
}

// A directed ring of six nodes on three ranks: each rank sends to one rank and hears another.
TEST(NodeExchange, ARoundOnADirectedRingIsOneBatchOfEveryTransfer) {
  expect_one_batch_per_round(Graph::directed(6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 0}}), 3);
}

// Gossip rounds on messages run in order, as NCCL runs them, every rank posting its receives before
// its sends: each round completes as one group, and every node hears its in-neighbours.
void expect_rounds_on_in_order_messages(const Graph& graph, int world) {
  const NodeLayout layout(graph.size(), world);
  auto fabric = std::make_shared<dtrain::testing::InOrderFabric>(world);
  dtrain::testing::run_threads(world, [&](int rank) {
    auto comm = dtrain::testing::in_order_communicator(fabric, rank, /*grouped=*/true);
    const NodeExchange exchange(comm.get(), layout, graph);
    std::vector<torch::Tensor> mine;
    for (int node : layout.local(rank)) mine.push_back(message_of(node));
    for (int k = 0; k < 3; ++k) {
      const auto heard = exchange.exchange(mine);
      for (int node : layout.local(rank)) {
        for (int from : graph.in_neighbours(node)) {
          const auto it = heard.find(from);
          EXPECT_TRUE(it != heard.end() && torch::equal(it->second, message_of(from)))
              << "node " << node << " did not hear node " << from << " in round " << k;
        }
      }
    }
  });
}

TEST(NodeExchange, RoundsCompleteOnMessagesRunInOrderAsNcclRunsThem) {
  expect_rounds_on_in_order_messages(Graph(6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 0}}), 3);
  expect_rounds_on_in_order_messages(Graph::directed(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}), 4);
  expect_rounds_on_in_order_messages(Graph(4, {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}), 2);
}

}  // namespace
}  // namespace dtrain::parallel
