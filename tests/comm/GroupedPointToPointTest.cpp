// Grouped point-to-point on a backend that runs messages in order, as NCCL does (the in-order test
// group, support/InOrderGroup.h, since no machine here has the two GPUs NCCL needs for two ranks):
// receives posted before sends wait for ever when each is its own operation, and complete when
// batch_isend_irecv issues them as one group (Note [Grouped point-to-point] in
// comm/c10d/C10dCommunicator.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/InOrderGroup.h"
#include "support/ThreadWorld.h"

namespace dtrain::testing {
namespace {

using comm::P2POp;
using comm::WorkPtr;

at::Tensor message(int rank, int tag, std::int64_t numel) {
  return at::arange(numel, at::kFloat) + (1000 * rank + tag);
}

TEST(GroupedPointToPoint, ReceivesBeforeSendsHangOneByOneAndCompleteAsOneGroup) {
  const int n = 3;
  for (bool grouped : {false, true}) {
    auto fabric = std::make_shared<InOrderFabric>(n);
    std::vector<std::string> errors(n);
    run_threads(n, [&](int rank) {
      auto comm = in_order_communicator(fabric, rank, grouped);
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      at::Tensor from_prev = at::zeros({7}), from_next = at::zeros({9});
      const std::vector<P2POp> ops{{P2POp::Kind::Recv, from_prev, prev, 1},
                                   {P2POp::Kind::Recv, from_next, next, 2},
                                   {P2POp::Kind::Send, message(rank, 1, 7), next, 1},
                                   {P2POp::Kind::Send, message(rank, 2, 9), prev, 2}};
      try {
        std::vector<WorkPtr> works;
        if (grouped) {
          works = comm->batch_isend_irecv(ops);
        } else {
          for (const auto& op : ops) {
            works.push_back(op.kind == P2POp::Kind::Send ? comm->send(op.tensor, op.peer, op.tag, true)
                                                         : comm->recv(op.tensor, op.peer, op.tag, true));
          }
        }
        for (const auto& work : works) work->wait();
        EXPECT_TRUE(at::equal(from_prev, message(prev, 1, 7))) << "rank " << rank;
        EXPECT_TRUE(at::equal(from_next, message(next, 2, 9))) << "rank " << rank;
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    });
    for (int r = 0; r < n; ++r) {
      const auto& error = errors[static_cast<std::size_t>(r)];
      if (grouped) {
        EXPECT_EQ(error, "") << "rank " << r;
      } else {
        EXPECT_NE(error.find("deadlock"), std::string::npos) << "rank " << r << ": " << error;
      }
    }
  }
}

// Groups one after another on one communicator, with their Works waited on in reverse order.
TEST(GroupedPointToPoint, SuccessiveGroupsCompleteInTurn) {
  const int n = 2;
  auto fabric = std::make_shared<InOrderFabric>(n);
  run_threads(n, [&](int rank) {
    auto comm = in_order_communicator(fabric, rank, /*grouped=*/true);
    const int peer = 1 - rank;
    for (int round = 0; round < 4; ++round) {
      at::Tensor in = at::zeros({5});
      auto works = comm->batch_isend_irecv(
          {{P2POp::Kind::Recv, in, peer, 0}, {P2POp::Kind::Send, message(rank, round, 5), peer, 0}});
      for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
      EXPECT_TRUE(at::equal(in, message(peer, round, 5))) << "rank " << rank << " round " << round;
    }
  });
}

}  // namespace
}  // namespace dtrain::testing
