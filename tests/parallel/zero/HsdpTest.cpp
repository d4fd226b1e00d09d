// HSDP: the zero strategy on parallel.mesh {dp_replicate: 2, dp_shard: 2}, four ranks as threads over
// gloo. Every stage ends where one process on the global batch ends and where zero without a mesh
// ends; its checkpoints load under plain zero and one process and theirs under it, continuing as if
// never interrupted; a step counts the shard group's and the replicate group's traffic; a rank holds
// the shard of a group of two; fp16's skipped step is skipped everywhere.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/parallel/zero/ZeroStrategy.h"
#include "parallel/zero/ZeroTestUtil.h"

namespace dtrain::parallel {
namespace {

using namespace zero_test;

const std::vector<std::string> kHsdp{"parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2"};

std::vector<std::string> with_hsdp(std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), kHsdp.begin(), kHsdp.end());
  return overrides;
}

// Float64, as ZeroTest: Adam's division by sqrt(v) would otherwise turn summation order into lr.
constexpr int kSteps = 10;

TEST(Hsdp, EveryStageEqualsOneProcessAndZeroWithoutAMesh) {
  const auto data = data_of(kSteps, torch::kDouble);
  for (const auto& overrides : std::vector<std::vector<std::string>>{{}, {"parallel.accumulation_steps=2"}}) {
    const auto one_process = train(config_of("local", "adam", overrides), 1, data, 0, kSteps, torch::kDouble);
    for (int stage : {1, 2, 3}) {
      const auto name = "stage " + std::to_string(stage) + (overrides.empty() ? "" : ", accumulation 2");
      const auto hsdp =
          train(zero_config(stage, "adam", with_hsdp(overrides)), 4, data, 0, kSteps, torch::kDouble);
      EXPECT_LE(max_abs_difference(hsdp, one_process), 1e-6) << name;
      const auto plain = train(zero_config(stage, "adam", overrides), 4, data, 0, kSteps, torch::kDouble);
      EXPECT_LE(max_abs_difference(hsdp, plain), 1e-6) << name;
    }
  }
}

// train.precision fp16 as plain zero takes it: the same rounded steps and loss scale, and an
// overflowing step skipped on every rank of both groups.
TEST(Hsdp, Fp16SkipsTheOverflowingStepOnEveryRankAsZeroDoes) {
  const int steps = 4;
  auto data = data_of(steps, torch::kFloat);
  data.inputs[2].mul_(1e6);
  for (int stage : {1, 3}) {
    std::vector<double> expected_losses, losses;
    const auto expected = train(zero_config(stage, "sgd"), 4, data, 0, steps, torch::kFloat, nullptr, nullptr,
                                optim::Precision::Fp16, &expected_losses);
    const auto end = train(zero_config(stage, "sgd", kHsdp), 4, data, 0, steps, torch::kFloat, nullptr,
                           nullptr, optim::Precision::Fp16, &losses);
    EXPECT_LE(max_abs_difference(end, expected), 1e-4) << "stage " << stage;
    ASSERT_EQ(losses.size(), expected_losses.size());
    EXPECT_TRUE(std::isnan(losses[2]) || std::isinf(losses[2])) << "stage " << stage << ": " << losses[2];
    for (std::size_t i = 0; i < losses.size(); ++i) {
      if (i != 2) EXPECT_NEAR(losses[i], expected_losses[i], 1e-3) << "stage " << stage << " step " << i;
    }
  }
}

// Saved at the half, loaded, saved again at once (the same tensors, bit for bit) and run to the end,
// which must be the uninterrupted run's.
void expect_resumes(const std::string& name, const config::RunConfig& cfg, int ranks, const Data& data,
                    const io::Checkpoint& saved, const State& uninterrupted) {
  const int half = kSteps / 2;
  io::Checkpoint again;
  train(cfg, ranks, data, half, half, torch::kDouble, &saved, &again);
  for (const auto& [key, value] : saved.tensors()) {
    ASSERT_TRUE(again.contains(key)) << name << ": " << key;
    EXPECT_TRUE(torch::equal(again.tensor(key), value)) << name << ": " << key;
  }
  EXPECT_EQ(again.tensors().size(), saved.tensors().size()) << name;
  const auto end = train(cfg, ranks, data, half, kSteps, torch::kDouble, &saved);
  EXPECT_LE(max_abs_difference(end, uninterrupted), 1e-6) << name;
}

TEST(Hsdp, CheckpointsMoveBetweenHsdpPlainZeroAndOneProcess) {
  const auto data = data_of(kSteps, torch::kDouble);
  const int half = kSteps / 2;
  for (int stage : {2, 3}) {
    const auto hsdp = zero_config(stage, "adam", kHsdp);
    const auto plain = zero_config(stage, "adam");
    const auto local = config_of("local", "adam");
    const auto uninterrupted = train(hsdp, 4, data, 0, kSteps, torch::kDouble);
    const auto tag = " (stage " + std::to_string(stage) + ")";

    io::Checkpoint from_hsdp;
    train(hsdp, 4, data, 0, half, torch::kDouble, nullptr, &from_hsdp);
    ASSERT_TRUE(from_hsdp.contains("optimizer/layers.1.weight/exp_avg")) << "whole tensors by parameter name";
    EXPECT_EQ(from_hsdp.tensor("optimizer/layers.1.weight/exp_avg").sizes(),
              (std::vector<std::int64_t>{31, 784}));
    expect_resumes("hsdp -> zero at 4 ranks" + tag, plain, 4, data, from_hsdp, uninterrupted);
    expect_resumes("hsdp -> one process" + tag, local, 1, data, from_hsdp, uninterrupted);
    expect_resumes("hsdp -> hsdp" + tag, hsdp, 4, data, from_hsdp, uninterrupted);

    io::Checkpoint from_plain, from_local;
    train(plain, 4, data, 0, half, torch::kDouble, nullptr, &from_plain);
    train(local, 1, data, 0, half, torch::kDouble, nullptr, &from_local);
    expect_resumes("zero at 4 ranks -> hsdp" + tag, hsdp, 4, data, from_plain, uninterrupted);
    expect_resumes("one process -> hsdp" + tag, hsdp, 4, data, from_local, uninterrupted);
  }
}

// mlp [31] sharded over 2: units 24,335 -> 2 x 12,168 = 24,336 and 320 -> 2 x 160, so P = 24,656
// padded elements and S = 12,328 per rank, as plain zero at 2 ranks.
TEST(Hsdp, StepCountsBothGroupsTrafficAndARankHoldsTheShardOfItsGroup) {
  constexpr std::uint64_t P = 24336 + 320, S = 12168 + 160;
  const auto data = data_of(1, torch::kFloat);
  const auto cfg = zero_config(2, "adam", kHsdp);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < 4; ++r) models.push_back(testing::build_model(cfg, 7 + r));
  dtrain::testing::run_world(4, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    const auto& zero = dynamic_cast<const ZeroStrategy&>(*strategy);
    EXPECT_EQ(zero.mesh(), (MeshShape{1, 2, 2}));
    ASSERT_EQ(zero.layouts().size(), 2u);
    EXPECT_EQ(zero.layouts()[0].shard, 12168);

    const auto world_before = comm->stats();
    const auto before = strategy->comm_stats();
    const auto result = strategy->train_step(rank_slice(data, 0, r, 4));
    const auto traffic = comm::difference(strategy->comm_stats(), before);
    EXPECT_EQ(result.bytes_sent, traffic.total().wire_bytes);
    // Two units reduce-scattered and all-gathered in the shard group, their gradient shards
    // all-reduced across the replicas, and the loss's all-reduce over the world.
    EXPECT_EQ(traffic.ops.at("reduce_scatter").calls, 2u);
    EXPECT_EQ(traffic.ops.at("allgather").calls, 2u);
    EXPECT_EQ(traffic.ops.at("allreduce").calls, 3u);
    EXPECT_EQ(traffic.ops.at("allreduce").bytes, 4 * S + 8);
    // Only the loss crossed the world's own communicator: the rest went through the groups.
    const auto world_traffic = comm::difference(comm->stats(), world_before);
    EXPECT_EQ(world_traffic.ops.at("allreduce").calls, 1u);
    EXPECT_EQ(world_traffic.ops.count("reduce_scatter"), 0u);
    EXPECT_GT(result.bytes_sent, world_traffic.total().wire_bytes);

    const auto f = strategy->memory_footprint();
    EXPECT_EQ(f.parameters, 4 * P);
    EXPECT_EQ(f.gradients, 4 * S);
    EXPECT_EQ(f.optimizer_state, 8 * S);
    EXPECT_NE(strategy->notes()
                  .at("zero/layout")
                  .find("12328 elements per rank's shard; hybrid (HSDP): sharded over 2 ranks, replicated 2 "
                        "times (pp 1 "
                        "x dp_replicate 2 x dp_shard 2)"),
              std::string::npos)
        << strategy->notes().at("zero/layout");
  });
}

}  // namespace
}  // namespace dtrain::parallel
