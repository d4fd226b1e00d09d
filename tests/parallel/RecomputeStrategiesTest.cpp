// train.activation_checkpointing under every strategy: a tiny transformer trained a few steps with
// its blocks recomputed in backward ends with the very weights (bit for bit) of the same run that
// keeps the activations, on every rank; and what a strategy cannot recompute is refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/Recompute.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

struct Case {
  std::string name;
  std::vector<std::string> overrides;
  int ranks;
  std::string backend;  // "in-process" or "gloo" (pipeline's point-to-point transfers)
};

std::vector<Case> cases() {
  return {
      {"local", {"parallel.strategy=local"}, 1, "in-process"},
      {"data_parallel", {"parallel.strategy=data_parallel"}, 2, "in-process"},
      {"data_parallel_powersgd",
       {"parallel.strategy=data_parallel", "parallel.data_parallel.compression=powersgd"},
       2,
       "in-process"},
      {"zero_stage3", {"parallel.strategy=zero", "parallel.zero.stage=3"}, 2, "in-process"},
      // HSDP: shards inside groups of two, the groups' gradients all-reduced (sub-communicators: gloo).
      {"zero_hsdp",
       {"parallel.strategy=zero", "parallel.zero.stage=3", "parallel.mesh.dp_replicate=2",
        "parallel.mesh.dp_shard=2"},
       4,
       "gloo"},
      {"pipeline", {"parallel.strategy=pipeline", "parallel.pipeline.stages=2"}, 2, "gloo"},
      {"dad", {"parallel.strategy=dad"}, 2, "in-process"},
      {"rankdad", {"parallel.strategy=rankdad"}, 2, "in-process"},
      {"decentralized", {"parallel.strategy=decentralized"}, 2, "gloo"},
  };
}

// For ctest's listing: the case's name rather than its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name << " on " << c.ranks << " ranks";
}

constexpr int kSteps = 3;
constexpr int kPerRank = 4;

// Every rank's model_state() after kSteps, with or without recomputation.
std::vector<std::map<std::string, torch::Tensor>> train(const Case& c, bool recompute) {
  std::vector<std::string> overrides{"model.name=transformer", "model.dim=8",       "model.heads=2",
                                     "model.depth=3",          "model.dropout=0.1", "optim.name=sgd",
                                     "optim.lr=0.05",          "optim.momentum=0.9"};
  overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
  const auto cfg = config::parse_run_config("", "<recompute test>", overrides);
  torch::manual_seed(21);
  const auto inputs = torch::randn({kSteps, c.ranks * kPerRank, 1, 28, 28});
  const auto targets = torch::randint(0, 10, {kSteps, c.ranks * kPerRank});
  std::vector<models::NetworkPtr> nets;
  for (int r = 0; r < c.ranks; ++r) {
    nets.push_back(testing::build_model(cfg, 7));
    if (recompute)
      models::apply_activation_checkpointing(*nets.back(), config::ActivationCheckpointing::Full, 0);
  }
  std::vector<std::map<std::string, torch::Tensor>> ends(c.ranks);
  auto body = [&](comm::CommunicatorPtr comm) {
    const int r = comm ? comm->rank() : 0;
    auto strategy = testing::build_strategy(cfg, nets[r], comm);
    for (int s = 0; s < kSteps; ++s) {
      // Dropout's masks come from the process's generator: the same draws in both runs.
      if (c.ranks == 1) torch::manual_seed(100 + s);
      const auto rows = torch::indexing::Slice(r * kPerRank, (r + 1) * kPerRank);
      strategy->train_step({inputs[s].index({rows}), targets[s].index({rows})});
    }
    ends[r] = strategy->model_state();
  };
  if (c.ranks == 1) {
    body(nullptr);
  } else {
    dtrain::testing::run_world(c.ranks, body, dtrain::testing::WorldOptions::on(c.backend));
  }
  return ends;
}

class RecomputeUnderStrategy : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeUnderStrategy, SameWeightsBitForBit) {
  const auto& c = GetParam();
  // Ranks that are threads share the CPU generator, so dropout's draws interleave differently
  // from run to run; with several ranks the models train without dropout.
  auto run = c;
  if (c.ranks > 1) run.overrides.push_back("model.dropout=0");
  const auto kept = train(run, false);
  const auto recomputed = train(run, true);
  for (int r = 0; r < c.ranks; ++r) {
    ASSERT_EQ(kept[r].size(), recomputed[r].size());
    for (const auto& [name, value] : kept[r]) {
      ASSERT_TRUE(recomputed[r].count(name)) << name;
      EXPECT_TRUE(torch::equal(value, recomputed[r].at(name))) << "rank " << r << " " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, RecomputeUnderStrategy, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A plain torch::nn::Linear is found by dAD in the graph after forward; inside a recomputed stage
// that graph exists only in backward.
TEST(RecomputeUnderDad, RefusesAPlainLinearInARecomputedStage) {
  const auto cfg = config::parse_run_config("", "<recompute test>", {"parallel.strategy=dad"});
  torch::manual_seed(1);
  auto net = models::network("mine", torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 10)));
  models::apply_activation_checkpointing(*net, config::ActivationCheckpointing::Full, 0);
  try {
    dtrain::testing::run_world(
        1, [&](comm::CommunicatorPtr comm) { testing::build_strategy(cfg, net, comm); },
        dtrain::testing::WorldOptions::on("in-process"));
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "Linear layer 'layers.1' is a plain torch::nn::Linear in a recomputed stage"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::parallel
