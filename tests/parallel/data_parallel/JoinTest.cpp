// data_parallel's shadow steps (parallel: Note [Join]): two gloo ranks with uneven data, one
// running out before the other, end together and leave the weights one process computes on the
// concatenation of each step's batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <vector>

#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"
#include "parallel/ParallelTestUtil.h"

namespace dtrain::parallel {
namespace {

using testing::build_model;
using testing::build_strategy;
using testing::max_relative_difference;
using testing::snapshot;

// Rank 0 holds 21 samples in batches of 8, 8 and 5; rank 1 holds 11, in batches of 8 and 3. Step 0
// weighs both ranks alike, step 1 weighs rank 0's 8 samples against rank 1's 3, step 2 is rank 0's
// alone: rank 1 shadows it.
TEST(DataParallel, JoinShadowStepsEqualOneProcessOnTheConcatenatedBatches) {
  config::RunConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.hidden = {16};
  cfg.optim.name = "sgd";
  cfg.optim.lr = 0.1;
  cfg.optim.momentum = 0.9;  // the shadow rank's optimizer steps too, or its momentum would differ
  cfg.parallel.strategy = "data_parallel";
  cfg.parallel.options.get<DataParallelStrategyOptions>("data_parallel").bucket_mb = 0.01;  // several buckets

  torch::manual_seed(3);
  const auto inputs = torch::randn({32, 1, 28, 28});
  const auto targets = torch::randint(0, 10, {32}, torch::kLong);
  // [first sample, samples) of each rank's batches, step by step.
  const std::vector<std::vector<std::pair<int, int>>> batches{{{0, 8}, {8, 8}, {16, 5}}, {{21, 8}, {29, 3}}};
  auto batch = [&](int rank, std::size_t step) -> std::optional<data::Batch> {
    if (step >= batches[rank].size()) return std::nullopt;
    const auto [first, n] = batches[rank][step];
    return data::Batch{inputs.narrow(0, first, n), targets.narrow(0, first, n)};
  };
  auto weight = [&](int rank, std::size_t step) {
    auto samples = [&](int r) { return step < batches[r].size() ? batches[r][step].second : 0; };
    return 2.0 * samples(rank) / (samples(0) + samples(1));
  };

  std::vector<models::NetworkPtr> models{build_model(cfg, 11), build_model(cfg, 11)};
  std::vector<std::vector<double>> losses(2);
  std::vector<std::vector<torch::Tensor>> params(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    auto strategy = build_strategy(cfg, models[rank], comm);
    auto* joinable = dynamic_cast<Joinable*>(strategy.get());
    ASSERT_NE(joinable, nullptr);
    for (std::size_t step = 0; step < 3; ++step) {
      strategy->set_learning_rate(cfg.optim.lr);
      const auto b = batch(rank, step);
      const auto result = joinable->join_step(b ? &*b : nullptr, b ? weight(rank, step) : 0.0);
      EXPECT_EQ(result.samples, b ? b->size() : 0);
      losses[rank].push_back(result.loss);
    }
    params[rank] = snapshot(*models[rank]);
  });

  auto local_cfg = cfg;
  local_cfg.parallel.strategy = "local";
  auto reference_model = build_model(local_cfg, 11);
  auto reference = build_strategy(local_cfg, reference_model, nullptr);
  for (std::size_t step = 0; step < 3; ++step) {
    std::vector<torch::Tensor> x, y;
    for (int r = 0; r < 2; ++r) {
      if (const auto b = batch(r, step)) {
        x.push_back(b->inputs);
        y.push_back(b->targets);
      }
    }
    reference->set_learning_rate(cfg.optim.lr);
    const auto expected_loss = reference->train_step({torch::cat(x), torch::cat(y)}).loss;
    for (int r = 0; r < 2; ++r)
      EXPECT_NEAR(losses[r][step], expected_loss, 1e-5) << "rank " << r << " step " << step;
  }
  const auto expected = snapshot(*reference_model);
  for (int r = 0; r < 2; ++r) EXPECT_LT(max_relative_difference(params[r], expected), 1e-5) << "rank " << r;
  // The weights moved: the comparison is not of two untouched models.
  EXPECT_GT(max_relative_difference(expected, snapshot(*build_model(cfg, 11))), 1e-3);
}

TEST(DataParallel, JoinRefusesPowerSgd) {
  config::RunConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.hidden = {16};
  cfg.parallel.strategy = "data_parallel";
  cfg.parallel.options.get<DataParallelStrategyOptions>("data_parallel").compression =
      GradCompression::PowerSgd;
  auto model = build_model(cfg, 1);
  dtrain::testing::run_world(1, [&](comm::CommunicatorPtr comm) {
    auto strategy = build_strategy(cfg, model, comm);
    auto* joinable = dynamic_cast<Joinable*>(strategy.get());
    ASSERT_NE(joinable, nullptr);
    try {
      joinable->check_joinable();
      ADD_FAILURE() << "powersgd accepted under join";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("data.equalize: join"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace dtrain::parallel
