// dAD and rank-dAD: dad gives data_parallel's gradient (short last batches included) on mlp and a
// small vit; rankdad at full rank gives dad's; parallel.dad.auto picks the predicted method per
// layer; dAD sends N (d_in + d_out) values per Linear layer and rank-dAD r (d_in + d_out).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/dad/DadStrategy.h"
#include "dtrain/parallel/dad/LayerPlan.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

// Small models; `overrides` come last and win.
config::RunConfig config_with(const std::string& model, const std::vector<std::string>& overrides) {
  std::vector<std::string> all{"model.name=" + model, "optim.name=sgd", "optim.lr=0.05",
                               "optim.momentum=0.9"};
  if (model == "vit")
    all.insert(all.end(), {"model.patch=7", "model.dim=16", "model.depth=1", "model.heads=2"});
  if (model == "mlp") all.push_back("model.hidden=[24]");
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_run_config("", "<dad test>", all);
}

// Per step and rank a batch; with `short_last`, the last rank's batch of the last step has 1 row.
std::vector<std::vector<data::Batch>> batches(int steps, int world, bool short_last, torch::Dtype dtype,
                                              int rows_per_rank = 4) {
  torch::manual_seed(77);
  std::vector<std::vector<data::Batch>> out(steps);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const int rows = short_last && s + 1 == steps && r + 1 == world ? 1 : rows_per_rank;
      out[s].push_back({torch::randn({rows, 1, 28, 28}).to(dtype), torch::randint(0, 10, {rows})});
    }
  }
  return out;
}

// The parameters after `steps` steps of `strategy` on `world` ranks (gloo threads).
std::vector<torch::Tensor> train(const config::RunConfig& cfg, int world,
                                 const std::vector<std::vector<data::Batch>>& data, torch::Dtype dtype,
                                 const std::string& backend = "gloo") {
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) models.push_back(testing::build_model(cfg, 5 + r, dtype));
  std::vector<std::vector<torch::Tensor>> ends(world);
  dtrain::testing::run_world(
      world,
      [&](comm::CommunicatorPtr comm) {
        auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
        for (const auto& step : data) strategy->train_step(step[comm->rank()]);
        for (const auto& entry : strategy->model_state()) ends[comm->rank()].push_back(entry.second.clone());
      },
      dtrain::testing::WorldOptions::on(backend));
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(testing::max_relative_difference(ends[r], ends[0]), 0.0) << "rank " << r;
  return ends[0];
}

struct DadCase {
  std::string model;
  int world;
  bool short_last;
};

void PrintTo(const DadCase& c, std::ostream* os) {
  *os << c.model << " on " << c.world << " ranks" << (c.short_last ? ", short last batch" : "");
}

class DadEqualsDataParallel : public ::testing::TestWithParam<DadCase> {};

TEST_P(DadEqualsDataParallel, AfterTwentySgdSteps) {
  const auto& c = GetParam();
  const auto data = batches(20, c.world, c.short_last, torch::kFloat);
  const auto expected =
      train(config_with(c.model, {"parallel.strategy=data_parallel"}), c.world, data, torch::kFloat);
  const auto got = train(config_with(c.model, {"parallel.strategy=dad"}), c.world, data, torch::kFloat);
  EXPECT_LE(testing::max_relative_difference(got, expected), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Models, DadEqualsDataParallel,
                         ::testing::Values(DadCase{"mlp", 2, false}, DadCase{"mlp", 3, true},
                                           DadCase{"vit", 2, true}, DadCase{"vit", 3, false},
                                           DadCase{"lenet5", 2, true}),
                         [](const auto& info) {
                           return info.param.model + "_" + std::to_string(info.param.world) + "ranks" +
                                  (info.param.short_last ? "_short_last_batch" : "");
                         });

TEST(RankDad, AtFullRankEqualsDad) {
  // Rank 64 is above every layer's rank (4 rows per rank); in float64 with converged iterations the
  // factors rebuild Δᵀ X exactly.
  const auto data = batches(5, 2, /*short_last=*/true, torch::kDouble);
  const auto dad =
      train(config_with("mlp", {"parallel.strategy=dad"}), 2, data, torch::kDouble, "in-process");
  const auto full =
      train(config_with("mlp", {"parallel.strategy=rankdad", "parallel.dad.rank=64",
                                "parallel.dad.power_iterations=500", "parallel.dad.tolerance=1e-12"}),
            2, data, torch::kDouble, "in-process");
  EXPECT_LE(testing::max_relative_difference(full, dad), 1e-5);
  // At rank 1 the mathematics changes: the parameters move elsewhere.
  const auto low = train(config_with("mlp", {"parallel.strategy=rankdad", "parallel.dad.rank=1"}), 2, data,
                         torch::kDouble, "in-process");
  EXPECT_GT(testing::max_relative_difference(low, dad), 1e-3);
}

TEST(DadAuto, PicksTheMethodThatSendsFewestBytes) {
  // 2 ranks, float32, 64 rows: a wide first layer is cheaper as rows (dAD) or factors, a two-class
  // head as its gradient (2050 values against rank-dAD's 4 x 1026 + 2).
  const LayerShape wide{784, 1024, 64, true};
  const LayerShape head{1024, 2, 64, true};
  EXPECT_DOUBLE_EQ(estimated_bytes(LayerMethod::Gradient, wide, 4, 2, 4), (784.0 * 1024 + 1024) * 4);
  EXPECT_DOUBLE_EQ(estimated_bytes(LayerMethod::Dad, wide, 4, 2, 4), 64.0 * (784 + 1024) * 4);
  EXPECT_DOUBLE_EQ(estimated_bytes(LayerMethod::RankDad, wide, 4, 2, 4), (4.0 * (784 + 1024) + 1024) * 4);
  const std::vector<LayerMethod> exact{LayerMethod::Gradient, LayerMethod::Dad};
  const std::vector<LayerMethod> any{LayerMethod::Gradient, LayerMethod::Dad, LayerMethod::RankDad};
  EXPECT_EQ(cheapest(exact, wide, 4, 2, 4), LayerMethod::Dad);
  EXPECT_EQ(cheapest(exact, head, 4, 2, 4), LayerMethod::Gradient);
  EXPECT_EQ(cheapest(any, wide, 4, 2, 4), LayerMethod::RankDad);
  EXPECT_EQ(cheapest(any, head, 4, 2, 4), LayerMethod::Gradient);
  // Rows fewer than the rank: dAD is exact and no dearer, and wins the tie over rank-dAD.
  EXPECT_EQ(cheapest(any, LayerShape{784, 1024, 2, false}, 4, 2, 4), LayerMethod::Dad);
}

TEST(DadAuto, ChoosesPerLayerOnTheFirstStepAndStaysExact) {
  // mlp 784 -> 1024 -> 10 with 16 rows per rank: dAD for the first layer (16 x 1808 values against
  // 803,840), the gradient for the head (10,250 against 16 x 1034).
  auto cfg = config_with("mlp", {"parallel.strategy=dad", "parallel.dad.auto=true", "model.hidden=[1024]",
                                 "parallel.dad.auto_trial_steps=0"});
  const auto data = batches(3, 2, false, torch::kFloat, 16);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 5), testing::build_model(cfg, 6)};
  std::vector<std::vector<LayerMethod>> methods(2);
  std::vector<std::map<std::string, std::string>> notes(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
    for (const auto& step : data) strategy->train_step(step[comm->rank()]);
    methods[comm->rank()] = dynamic_cast<DadStrategy&>(*strategy).methods();
    notes[comm->rank()] = strategy->notes();
  });
  const std::vector<LayerMethod> expected{LayerMethod::Dad, LayerMethod::Gradient};
  EXPECT_EQ(methods[0], expected);
  EXPECT_EQ(methods[1], expected);
  ASSERT_EQ(notes[0].size(), 2u);
  EXPECT_EQ(notes[0].begin()->second.rfind("dad (1024 x 784, 16 rows", 0), 0u) << notes[0].begin()->second;
  // Both methods are exact: the parameters are data_parallel's.
  const auto dp = train(config_with("mlp", {"parallel.strategy=data_parallel", "model.hidden=[1024]"}), 2,
                        data, torch::kFloat);
  EXPECT_LE(testing::max_relative_difference(train(cfg, 2, data, torch::kFloat), dp), 1e-5);
}

TEST(DadAuto, TimesEachPlanKeepsTheSameOneOnEveryRankAndStaysExact) {
  // Plans: cheapest in bytes (dAD, gradient), all gradient, all dAD; at most two steps each after the first.
  auto cfg = config_with("mlp", {"parallel.strategy=dad", "parallel.dad.auto=true", "model.hidden=[1024]",
                                 "parallel.dad.auto_trial_steps=2"});
  const auto data = batches(9, 2, false, torch::kFloat, 16);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 5), testing::build_model(cfg, 6)};
  std::vector<std::vector<LayerMethod>> kept(2);
  std::vector<std::string> summary(2);
  std::vector<std::vector<torch::Tensor>> ends(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
    for (const auto& step : data) strategy->train_step(step[comm->rank()]);
    kept[comm->rank()] = dynamic_cast<DadStrategy&>(*strategy).methods();
    summary[comm->rank()] = strategy->notes().at("dad/auto");
    for (const auto& entry : strategy->model_state()) ends[comm->rank()].push_back(entry.second.clone());
  });
  EXPECT_EQ(kept[0], kept[1]);
  EXPECT_EQ(summary[0], summary[1]);
  for (const char* plan : {"cheapest in bytes ", "all gradient ", "all dad "}) {
    EXPECT_NE(summary[0].find(plan), std::string::npos) << summary[0];
  }
  EXPECT_NE(summary[0].find("; kept "), std::string::npos) << summary[0];
  // Every plan is exact: whichever ran when, the parameters are data_parallel's.
  const auto dp = train(config_with("mlp", {"parallel.strategy=data_parallel", "model.hidden=[1024]"}), 2,
                        data, torch::kFloat);
  EXPECT_LE(testing::max_relative_difference(ends[0], dp), 1e-5);
}

TEST(PlanTrial, DropsAPlanFarSlowerThanTheBestAfterOneRoundAndKeepsTheFastestOfTheSlowestRank) {
  using Plan = PlanTrial::Plan;
  const std::vector<Plan> plans{{LayerMethod::Gradient}, {LayerMethod::Dad}, {LayerMethod::RankDad}};
  // Seconds per step by rank and plan: the gradient is ten times slower; dad is fastest on rank 0
  // but slowest on rank 1, so rank-dAD's slowest rank is the fastest.
  const double seconds[2][3] = {{1.0, 0.08, 0.11}, {1.2, 0.13, 0.12}};
  std::vector<std::vector<std::size_t>> used(2);
  std::vector<std::string> summary(2);
  std::vector<Plan> kept(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    PlanTrial trial(plans, {"all gradient", "all dad", "all rankdad"}, 4);
    while (!trial.settled()) {
      const auto p = static_cast<std::size_t>(trial.current().front());
      used[r].push_back(p);
      trial.record(seconds[r][p], *comm);
    }
    summary[r] = trial.summary();
    kept[r] = trial.current();
  });
  // Round 1 tries all three; rounds 2 to 4 only dad and rank-dAD.
  const std::vector<std::size_t> expected{0, 1, 2, 1, 2, 1, 2, 1, 2};
  EXPECT_EQ(used[0], expected);
  EXPECT_EQ(used[1], expected);
  EXPECT_EQ(kept[0], plans[2]);
  EXPECT_EQ(kept[1], plans[2]);
  EXPECT_EQ(summary[0], summary[1]);
  EXPECT_EQ(summary[0],
            "all gradient 1200.0 ms (dropped after round 1), all dad 130.0 ms, all rankdad 120.0 ms; kept "
            "all rankdad");
}

TEST(DadAuto, LayersWhoseGradientTravelsWholeAreNotTapped) {
  // mlp 784 -> 1024 -> 10 with 16 rows: dAD for the first layer, the gradient for the second.
  auto cfg = config_with("mlp", {"parallel.strategy=dad", "parallel.dad.auto=true", "model.hidden=[1024]",
                                 "parallel.dad.auto_trial_steps=0"});
  const auto data = batches(2, 2, false, torch::kFloat, 16);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 5), testing::build_model(cfg, 6)};
  std::vector<std::vector<bool>> tapped(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
    for (const auto& step : data) strategy->train_step(step[comm->rank()]);
    for (const auto& entry : models[comm->rank()]->named_modules()) {
      if (auto* linear = dynamic_cast<models::LinearImpl*>(entry.value().get()))
        tapped[comm->rank()].push_back(linear->tapped());
    }
  });
  const std::vector<bool> expected{true, false};
  EXPECT_EQ(tapped[0], expected);
  EXPECT_EQ(tapped[1], expected);
}

TEST(DadBytes, DadSendsNRowsAndRankDadRColumnsPerLayer) {
  // mlp 784 -> 24 -> 10, 4 rows per rank, float32: dAD's all-gather carries 4 (784 + 24) + 4 (24 + 10)
  // values per rank and step; rank-dAD at rank 2, 2 (784 + 24) + 2 (24 + 10).
  for (const auto& [strategy, values] : std::vector<std::pair<std::string, std::int64_t>>{
           {"dad", 4 * (784 + 24) + 4 * (24 + 10)}, {"rankdad", 2 * (784 + 24) + 2 * (24 + 10)}}) {
    SCOPED_TRACE(strategy);
    auto cfg = config_with("mlp", {"parallel.strategy=" + strategy, "parallel.dad.rank=2"});
    const auto data = batches(3, 2, false, torch::kFloat);
    std::vector<models::NetworkPtr> models{testing::build_model(cfg, 5), testing::build_model(cfg, 5)};
    std::vector<comm::CommStats> stats(2);
    dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
      auto s = testing::build_strategy(cfg, models[comm->rank()], comm);
      const auto before = s->comm_stats();
      for (const auto& step : data) s->train_step(step[comm->rank()]);
      stats[comm->rank()] = comm::difference(s->comm_stats(), before);
    });
    // Per step one all-gather of the 2 layers' counts (int64) and one of the values (float32); on the
    // first step one more of the 2 layers' rows, which fixes the plan. An all-gather's payload is
    // its output, the world's share.
    EXPECT_EQ(stats[0].ops.at("allgather").calls, 2u * 3 + 1);
    EXPECT_EQ(stats[0].ops.at("allgather").bytes, 2u * (3 * (2 * 8 + values * 4) + 2 * 8));
  }
}

}  // namespace
}  // namespace dtrain::parallel
