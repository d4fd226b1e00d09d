// Recovering the training state from a peer (Note [Recovering from a peer]), three ranks over a real
// communicator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "dtrain/train/PeerRecovery.h"
#include "support/ThreadWorld.h"

namespace dtrain::train {
namespace {

io::Checkpoint state_of_step(std::int64_t step) {
  io::Checkpoint c;
  c.set_tensor("model.w", torch::full({3, 4}, static_cast<float>(step)));
  c.set_tensor("optimizer.momentum", torch::arange(7, torch::kDouble) * static_cast<double>(step));
  c.set_metadata({{"step", step}});
  return c;
}

TEST(PeerRecovery, EveryMemberTakesTheHighestStepFromTheLowestRankHoldingIt) {
  // Rank 0 is new (no state), ranks 1 and 2 survived at steps 7 and 8; rank 2 finished the step that
  // failed for rank 1.
  std::vector<PeerState> got(3);
  std::mutex mutex;
  dtrain::testing::run_world(3, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    std::optional<io::Checkpoint> held;
    if (rank > 0) held = state_of_step(6 + rank);
    auto state = recover_from_peer(*comm, held, rank > 0 ? 6 + rank : -1);
    const std::lock_guard<std::mutex> lock(mutex);
    got[rank] = std::move(state);
  });
  const auto expected = state_of_step(8);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].checkpoint.has_value()) << "rank " << r;
    EXPECT_EQ(got[r].step, 8) << "rank " << r;
    EXPECT_EQ(got[r].source_rank, 2) << "rank " << r;
    EXPECT_GT(got[r].bytes, 0u);
    EXPECT_EQ(got[r].checkpoint->metadata().at("step"), 8) << "rank " << r;
    for (const auto& [name, value] : expected.tensors()) {
      EXPECT_TRUE(torch::equal(got[r].checkpoint->tensor(name), value)) << "rank " << r << " " << name;
    }
  }
}

TEST(PeerRecovery, WithoutAnyStateNobodySends) {
  std::vector<PeerState> got(2);
  dtrain::testing::run_world(
      2, [&](comm::CommunicatorPtr comm) { got[comm->rank()] = recover_from_peer(*comm, std::nullopt, -1); });
  for (const auto& state : got) {
    EXPECT_FALSE(state.checkpoint.has_value());
    EXPECT_EQ(state.source_rank, -1);
  }
}

}  // namespace
}  // namespace dtrain::train
