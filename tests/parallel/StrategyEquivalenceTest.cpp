// DESIGN §4, as one test: every strategy that keeps the mathematics ends, after several steps on N
// ranks with batch b each, with the parameters one process reaches with batch N*b. One row per
// strategy configuration: a new strategy gets its test by adding a row, and a strategy registered
// as exact without a row fails EveryExactStrategyHasARow. Strategies are built through the
// registry from a configuration, as the trainer builds them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

struct Row {
  std::string strategy;
  std::vector<std::string> overrides;  // its own options, parallel.<strategy>.*=...
  std::vector<int> ranks;              // world sizes to run it at
  std::vector<std::string> models;
  bool lbfgs = true;  // also run lbfgs on the mlp (zero refuses it)
  std::string tag{};  // in the test's name instead of "options" (rows of one strategy told apart)
  // A pipeline: point-to-point transfers (gloo; the in-process double has none), no
  // accumulation_steps and no lbfgs, and training outputs on each pipeline's last stage only.
  bool pipeline = false;
  // Splits the world into groups (parallel.mesh): gloo, since the in-process double has no split.
  bool subgroups = false;
};

// The table. Keep a row for every strategy registered with exact = true.
const std::vector<Row>& rows() {
  static const std::vector<Row> table{
      {"local", {}, {1}, {"mlp", "lenet5"}},
      {"data_parallel", {}, {2, 3, 4}, {"mlp", "lenet5"}},
      // A bucket per parameter: buckets complete out of order and must launch in order.
      {"data_parallel", {"parallel.data_parallel.bucket_mb=0.001"}, {3}, {"lenet5"}},
      // Linear layers through dAD, the convolutions (lenet5) through the buckets.
      {"dad", {}, {2, 3}, {"mlp", "lenet5"}},
      // Every layer as the cheapest of its gradient and dAD.
      {"dad", {"parallel.dad.auto=true"}, {2}, {"mlp"}},
      // Sharded: every stage; units that do not divide evenly by 3 ranks (padding).
      {"zero", {"parallel.zero.stage=1"}, {3}, {"mlp"}, false, "stage1"},
      {"zero", {"parallel.zero.stage=2"}, {3}, {"lenet5"}, false, "stage2"},
      {"zero", {"parallel.zero.stage=3"}, {2, 3}, {"mlp", "lenet5"}, false, "stage3"},
      // HSDP (parallel.mesh): every stage sharded over pairs of ranks, the pairs' shards all-reduced.
      {"zero",
       {"parallel.zero.stage=1", "parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2"},
       {4},
       {"mlp"},
       /*lbfgs=*/false,
       "hsdp_stage1",
       /*pipeline=*/false,
       /*subgroups=*/true},
      {"zero",
       {"parallel.zero.stage=2", "parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2"},
       {4},
       {"mlp"},
       /*lbfgs=*/false,
       "hsdp_stage2",
       /*pipeline=*/false,
       /*subgroups=*/true},
      {"zero",
       {"parallel.zero.stage=3", "parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2"},
       {4},
       {"mlp"},
       /*lbfgs=*/false,
       "hsdp_stage3",
       /*pipeline=*/false,
       /*subgroups=*/true},
      // One 2-stage pipeline, and two of them side by side (world 4).
      {"pipeline",
       {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=3"},
       {2, 4},
       {"mlp", "lenet5"},
       /*lbfgs=*/false,
       "",
       /*pipeline=*/true},
      // The same on parallel.mesh: pp outermost, so a stage's two replicas are consecutive ranks.
      {"pipeline",
       {"parallel.mesh.pp=2", "parallel.mesh.dp_replicate=2", "parallel.pipeline.micro_batches=3"},
       {4},
       {"mlp"},
       /*lbfgs=*/false,
       "mesh",
       /*pipeline=*/true},
  };
  return table;
}

struct Case {
  Row row;
  int ranks;
  std::string model;
  int accumulation;
  std::string optimizer;  // sgd and adam take 20 steps, lbfgs 5 (up to 5 evaluations each)
  std::string backend;    // "gloo" or "in-process"
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& c = info.param;
  const std::string options = !c.row.tag.empty()        ? "_" + c.row.tag
                              : c.row.overrides.empty() ? ""
                                                        : "_options";
  std::string name = c.row.strategy + options + "_" + std::to_string(c.ranks) + "ranks_" + c.model +
                     "_accum" + std::to_string(c.accumulation) + "_" + c.optimizer + "_" +
                     (c.backend == "gloo" ? "gloo" : "inprocess");
  return name;
}

// For ctest's listing: the case's name rather than its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.row.strategy << " on " << c.ranks << " ranks, " << c.model << ", " << c.optimizer << ", "
      << c.backend;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const auto& row : rows()) {
    for (int ranks : row.ranks) {
      for (const auto& model : row.models) {
        for (const char* backend : {"in-process", "gloo"}) {
          // One rank needs no real transport.
          if (ranks == 1 && std::string(backend) == "gloo") continue;
          if ((row.pipeline || row.subgroups) && std::string(backend) != "gloo") continue;
          for (int accumulation : {1, 2}) {
            if (row.pipeline && accumulation > 1) continue;
            for (const char* optimizer : {"sgd", "adam"})
              out.push_back({row, ranks, model, accumulation, optimizer, backend});
          }
          if (model == "mlp" && row.lbfgs) out.push_back({row, ranks, model, 1, "lbfgs", backend});
        }
      }
    }
  }
  return out;
}

constexpr int kPerRankBatch = 4;

int steps_of(const Case& c) {
  return c.optimizer == "lbfgs" ? 5 : 20;
}

// Float64 isolates the mathematics, which must agree; float32's rounding is a property of the
// order of the sums, which differs between one batch and N slices, and between backends.
// - Adam divides by sqrt(v) and L-BFGS by curvature estimates: in float32 the rounding of a
//   near-zero gradient entry can move an update by up to lr.
// - SGD on LeNet-5 (ReLU, max-pooling) has decisions near a tie: data_parallel on 3 ranks over gloo
//   ended 2.4e-3 from one process on LibTorch 2.11 (an H100 machine, the same figure in two
//   runs). Here (1.13), scaling the in-process all-reduce's sums by a random 1 +- 5e-5 gives the
//   same 2.4e-3 for two seeds in three, against 2.4e-7 to 4.8e-6 for 1 +- 1.2e-7 to 1 +- 5e-6: one
//   ReLU or max-pool decision flips. So SGD runs in float64 too.
torch::Dtype dtype_of(const Case&) {
  return torch::kDouble;
}

config::RunConfig config_of(const std::string& strategy, const std::vector<std::string>& options,
                            const Case& c, int accumulation) {
  std::vector<std::string> overrides = options;
  overrides.push_back("parallel.strategy=" + strategy);
  overrides.push_back("parallel.accumulation_steps=" + std::to_string(accumulation));
  overrides.push_back("optim.name=" + c.optimizer);
  if (c.optimizer == "sgd") overrides.insert(overrides.end(), {"optim.lr=0.05", "optim.momentum=0.9"});
  if (c.optimizer == "adam") overrides.push_back("optim.lr=0.001");
  if (c.optimizer == "lbfgs") overrides.insert(overrides.end(), {"optim.lr=0.5", "optim.lbfgs_max_iter=5"});
  overrides.push_back("model.name=" + c.model);
  if (c.model == "mlp") overrides.push_back("model.hidden=[32]");
  return config::parse_run_config("", "<equivalence test>", overrides);
}

std::vector<torch::Tensor> values(const std::map<std::string, torch::Tensor>& state) {
  std::vector<torch::Tensor> out;
  for (const auto& entry : state) out.push_back(entry.second.clone());
  return out;
}

class StrategyEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(StrategyEquivalence, EqualsOneProcessOnTheGlobalBatch) {
  const auto& c = GetParam();
  const int steps = steps_of(c);
  const auto dtype = dtype_of(c);
  torch::manual_seed(1234);
  const auto inputs = torch::randn({steps, c.ranks * kPerRankBatch, 1, 28, 28}).to(dtype);
  const auto targets = torch::randint(0, 10, {steps, c.ranks * kPerRankBatch});

  const auto reference_config = config_of("local", {}, c, 1);
  auto reference =
      testing::build_strategy(reference_config, testing::build_model(reference_config, 7, dtype), nullptr);
  for (int s = 0; s < steps; ++s) reference->train_step({inputs[s], targets[s]});
  const auto expected = values(reference->model_state());

  const auto cfg = config_of(c.row.strategy, c.row.overrides, c, c.accumulation);
  // Rank r starts from seed 7 + r: only rank 0 starts like the reference; a strategy that
  // replicates the model must make the others equal.
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < c.ranks; ++r)
    models.push_back(testing::build_model(cfg, c.row.strategy == "local" ? 7 : 7 + r, dtype));
  std::vector<std::vector<torch::Tensor>> ends(c.ranks);
  std::vector<std::vector<double>> losses(c.ranks);
  dtrain::testing::run_world(
      c.ranks,
      [&](comm::CommunicatorPtr comm) {
        const int r = comm->rank();
        auto strategy = testing::build_strategy(cfg, models[r], comm);
        for (int s = 0; s < steps; ++s) {
          const auto rows = torch::indexing::Slice(r * kPerRankBatch, (r + 1) * kPerRankBatch);
          const auto result = strategy->train_step({inputs[s].index({rows}), targets[s].index({rows})});
          EXPECT_EQ(result.samples, kPerRankBatch);
          if (result.outputs.defined() || !c.row.pipeline) {
            ASSERT_TRUE(result.outputs.defined());
            EXPECT_EQ(result.outputs.size(0), kPerRankBatch);
          }
          losses[r].push_back(result.loss);
        }
        ends[r] = values(strategy->model_state());
      },
      dtrain::testing::WorldOptions::on(c.backend));
  for (int r = 0; r < c.ranks; ++r) {
    EXPECT_LE(testing::max_relative_difference(ends[r], expected), 1e-5) << "rank " << r;
    // The reported loss is the global batch's mean, the same on every rank.
    EXPECT_EQ(losses[r], losses[0]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, StrategyEquivalence, ::testing::ValuesIn(cases()), case_name);

TEST(StrategyEquivalenceTable, EveryExactStrategyHasARow) {
  for (const auto& info : registered_strategies()) {
    if (!info.exact) continue;
    const bool has_row =
        std::any_of(rows().begin(), rows().end(), [&](const Row& row) { return row.strategy == info.name; });
    EXPECT_TRUE(has_row) << "strategy " << info.name
                         << " is registered as exact (equal to one process) but has no row in "
                            "StrategyEquivalenceTest.cpp's table";
  }
}

}  // namespace
}  // namespace dtrain::parallel
