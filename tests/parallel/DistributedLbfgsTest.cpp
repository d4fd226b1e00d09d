// Note [Distributed L-BFGS], tested: L-BFGS on 2 ranks over gloo, each with half of every batch,
// ends where one process ends on the union batch, with and without the strong-Wolfe line search,
// and every rank evaluates its closure exactly as often as that one process does, step by step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "parallel/decentralized/DecentralizedTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

constexpr int kRanks = 2;
constexpr int kPerRankBatch = 8;
constexpr int kSteps = 10;

struct LbfgsCase {
  std::string strategy;
  std::string line_search;
};

std::string case_name(const ::testing::TestParamInfo<LbfgsCase>& info) {
  return info.param.strategy + "_" + info.param.line_search;
}

void PrintTo(const LbfgsCase& c, std::ostream* os) {
  *os << c.strategy << " with line search " << c.line_search;
}

config::RunConfig config_of(const std::string& strategy, const std::string& line_search) {
  return config::parse_run_config(
      "", "<lbfgs test>",
      {"parallel.strategy=" + strategy, "optim.name=lbfgs",
       "optim.lr=" + std::string(line_search == "none" ? "0.5" : "1"), "optim.lbfgs_max_iter=4",
       "optim.lbfgs_history=5", "optim.lbfgs_line_search=" + line_search, "model.name=mlp",
       "model.hidden=[16]"});
}

std::vector<torch::Tensor> values(const std::map<std::string, torch::Tensor>& state) {
  std::vector<torch::Tensor> out;
  for (const auto& entry : state) out.push_back(entry.second.clone());
  return out;
}

struct LbfgsRun {
  std::vector<torch::Tensor> end;         // parameters after kSteps
  std::vector<std::int64_t> evaluations;  // closure evaluations per step
  double evaluations_metric = 0;          // optim/closure_evaluations afterwards
};

class DistributedLbfgs : public ::testing::TestWithParam<LbfgsCase> {};

// float64, as StrategyEquivalenceTest explains for L-BFGS: the summation order of one batch and
// two halves differs, and curvature estimates amplify float32 rounding; the mathematics must agree.
TEST_P(DistributedLbfgs, EqualsOneProcessOnTheUnionBatchAndCountsTheSameEvaluations) {
  const auto& c = GetParam();
  torch::manual_seed(99);
  const auto inputs = torch::randn({kSteps, kRanks * kPerRankBatch, 1, 28, 28}).to(torch::kDouble);
  const auto targets = torch::randint(0, 10, {kSteps, kRanks * kPerRankBatch});

  const auto reference_config = config_of("local", c.line_search);
  auto reference = testing::build_strategy(
      reference_config, testing::build_model(reference_config, 5, torch::kDouble), nullptr);
  LbfgsRun expected;
  for (int s = 0; s < kSteps; ++s)
    expected.evaluations.push_back(reference->train_step({inputs[s], targets[s]}).closure_evaluations);
  expected.end = values(reference->model_state());
  const auto total =
      std::accumulate(expected.evaluations.begin(), expected.evaluations.end(), std::int64_t{0});
  // Otherwise the test would not exercise repeated evaluations.
  ASSERT_GT(total, kSteps) << "L-BFGS evaluated its closure once per step";
  EXPECT_EQ(reference->metrics().at("optim/closure_evaluations"), static_cast<double>(total));

  const auto cfg = config_of(c.strategy, c.line_search);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < kRanks; ++r) models.push_back(testing::build_model(cfg, 5 + r, torch::kDouble));
  std::vector<LbfgsRun> runs(kRanks);
  dtrain::testing::run_world(
      kRanks,
      [&](comm::CommunicatorPtr comm) {
        const int r = comm->rank();
        auto strategy = testing::build_strategy(cfg, models[r], comm);
        for (int s = 0; s < kSteps; ++s) {
          const auto rows = torch::indexing::Slice(r * kPerRankBatch, (r + 1) * kPerRankBatch);
          runs[r].evaluations.push_back(
              strategy->train_step({inputs[s].index({rows}), targets[s].index({rows})}).closure_evaluations);
        }
        runs[r].end = values(strategy->model_state());
        runs[r].evaluations_metric = strategy->metrics().at("optim/closure_evaluations");
      },
      dtrain::testing::WorldOptions::on("gloo"));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_LE(testing::max_relative_difference(runs[r].end, expected.end), 1e-5) << "rank " << r;
    EXPECT_EQ(runs[r].evaluations, expected.evaluations) << "rank " << r;
    EXPECT_EQ(runs[r].evaluations_metric, static_cast<double>(total)) << "rank " << r;
  }
}

// The strategies that declare lbfgs and communicate, as their registrations say.
std::vector<std::string> distributed_lbfgs_strategies(bool exact_only) {
  std::vector<std::string> names;
  for (const auto& info : registered_strategies()) {
    if (info.capabilities.lbfgs && info.needs_communicator && (info.exact || !exact_only))
      names.push_back(info.name);
  }
  return names;
}

// Every exact one, with and without the line search.
std::vector<LbfgsCase> exact_cases() {
  std::vector<LbfgsCase> cases;
  for (const auto& strategy : distributed_lbfgs_strategies(/*exact_only=*/true)) {
    for (const char* line_search : {"none", "strong_wolfe"}) cases.push_back({strategy, line_search});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Strategies, DistributedLbfgs, ::testing::ValuesIn(exact_cases()), case_name);

// In float32 too, where one process and two ranks round differently, the ranks stay identical to
// each other bit for bit (the reductions leave the same bits everywhere), evaluate as often, and
// approximate strategies (rank-dAD) keep their ranks together just the same: every strategy that
// declares lbfgs and communicates, exact or not.
TEST(DistributedLbfgsFloat32, RanksStayBitwiseIdentical) {
  torch::manual_seed(7);
  const auto inputs = torch::randn({kSteps, kRanks * kPerRankBatch, 1, 28, 28});
  const auto targets = torch::randint(0, 10, {kSteps, kRanks * kPerRankBatch});
  const auto strategies = distributed_lbfgs_strategies(/*exact_only=*/false);
  ASSERT_FALSE(strategies.empty());
  for (const auto& strategy : strategies) {
    const auto cfg = config_of(strategy, "strong_wolfe");
    std::vector<models::NetworkPtr> models;
    for (int r = 0; r < kRanks; ++r) models.push_back(testing::build_model(cfg, 11 + r));
    std::vector<LbfgsRun> runs(kRanks);
    dtrain::testing::run_world(
        kRanks,
        [&](comm::CommunicatorPtr comm) {
          const int r = comm->rank();
          auto strategy_on_rank = testing::build_strategy(cfg, models[r], comm);
          for (int s = 0; s < kSteps; ++s) {
            const auto rows = torch::indexing::Slice(r * kPerRankBatch, (r + 1) * kPerRankBatch);
            runs[r].evaluations.push_back(
                strategy_on_rank->train_step({inputs[s].index({rows}), targets[s].index({rows})})
                    .closure_evaluations);
          }
          runs[r].end = values(strategy_on_rank->model_state());
        },
        dtrain::testing::WorldOptions::on("gloo"));
    EXPECT_EQ(runs[1].evaluations, runs[0].evaluations) << strategy;
    EXPECT_GT(std::accumulate(runs[0].evaluations.begin(), runs[0].evaluations.end(), std::int64_t{0}),
              kSteps);
    ASSERT_EQ(runs[1].end.size(), runs[0].end.size());
    for (std::size_t i = 0; i < runs[0].end.size(); ++i) {
      EXPECT_TRUE(torch::equal(runs[1].end[i], runs[0].end[i])) << strategy << ", tensor " << i;
    }
    // And they moved: a model that stayed where it started would agree trivially.
    const auto local = config_of("local", "strong_wolfe");
    const auto start =
        values(testing::build_strategy(local, testing::build_model(local, 11), nullptr)->model_state());
    EXPECT_GT(testing::max_relative_difference(runs[0].end, start), 1e-3) << strategy;
  }
}

// A strategy that does not declare lbfgs refuses it when it is built, naming the setting: the
// declaration the sweeps above read holds both ways.
TEST(DistributedLbfgsRefusal, StrategiesThatDoNotDeclareItRefuseIt) {
  for (const auto& info : registered_strategies()) {
    if (info.capabilities.lbfgs) continue;
    auto cfg = info.name == "decentralized" ? testing::decentralized_config("dsgd", "complete", kRanks)
                                            : config_of(info.name, "strong_wolfe");
    cfg.optim.name = "lbfgs";
    cfg.optim.momentum = 0.0;
    std::vector<std::string> errors(kRanks);
    dtrain::testing::run_world(
        kRanks,
        [&](comm::CommunicatorPtr comm) {
          const int r = comm->rank();
          try {
            testing::build_strategy(cfg, testing::build_model(cfg, 3), comm);
          } catch (const std::invalid_argument& e) {
            errors[r] = e.what();
          }
        },
        dtrain::testing::WorldOptions::on("gloo"));
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_NE(errors[r].find("optim.name: lbfgs"), std::string::npos)
          << info.name << " rank " << r << ": " << (errors[r].empty() ? "accepted lbfgs" : errors[r]);
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel

namespace dtrain::parallel {
namespace {

// optim.lbfgs_line_search takes effect: without a line search L-BFGS evaluates once per
// iteration (lbfgs_max_iter per step while it does not converge); strong Wolfe evaluates until
// its conditions hold, and ends elsewhere.
TEST(DistributedLbfgsLineSearch, StrongWolfeChangesTheEvaluationsAndTheSteps) {
  torch::manual_seed(3);
  const auto inputs = torch::randn({kSteps, kPerRankBatch, 1, 28, 28}).to(torch::kDouble);
  const auto targets = torch::randint(0, 10, {kSteps, kPerRankBatch});
  std::map<std::string, std::vector<std::int64_t>> evaluations;
  std::map<std::string, std::vector<torch::Tensor>> ends;
  for (const std::string search : {"none", "strong_wolfe"}) {
    const auto cfg = config_of("local", search);
    auto strategy = testing::build_strategy(cfg, testing::build_model(cfg, 5, torch::kDouble), nullptr);
    for (int s = 0; s < kSteps; ++s)
      evaluations[search].push_back(strategy->train_step({inputs[s], targets[s]}).closure_evaluations);
    ends[search] = values(strategy->model_state());
  }
  EXPECT_EQ(evaluations["none"], std::vector<std::int64_t>(kSteps, 4));
  // 10 steps of 4 iterations filled the history of 5; the state is saveable before that too.
  const auto cfg = config_of("local", "strong_wolfe");
  auto young = testing::build_strategy(cfg, testing::build_model(cfg, 5, torch::kDouble), nullptr);
  young->train_step({inputs[0], targets[0]});
  io::Checkpoint checkpoint;
  EXPECT_NO_THROW(young->save(checkpoint));
  EXPECT_TRUE(checkpoint.contains("optimizer/lbfgs"));
  auto resumed = testing::build_strategy(cfg, testing::build_model(cfg, 6, torch::kDouble), nullptr);
  resumed->load(checkpoint);
  EXPECT_EQ(resumed->train_step({inputs[1], targets[1]}).closure_evaluations,
            young->train_step({inputs[1], targets[1]}).closure_evaluations);
  EXPECT_LE(testing::max_relative_difference(values(resumed->model_state()), values(young->model_state())),
            1e-12);
  EXPECT_NE(evaluations["strong_wolfe"], evaluations["none"]);
  EXPECT_GT(testing::max_relative_difference(ends["strong_wolfe"], ends["none"]), 1e-3);
}

}  // namespace
}  // namespace dtrain::parallel
