// The acceptance test of data parallelism: data_parallel on N ranks with batch b ends with the same
// parameters as local training with batch N*b, with and without gradient accumulation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/parallel/DataParallelStrategy.h"
#include "dtrain/parallel/LocalStrategy.h"
#include "dtrain/parallel/MicroBatches.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using namespace testing;

constexpr int kSteps = 20;
constexpr int kPerRankBatch = 4;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name, torch::nn::Module& m) {
  if (name == "sgd") {
    return std::make_unique<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  return std::make_unique<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(1e-3));
}

struct Data {
  torch::Tensor inputs;   // (steps, global batch, 1, 28, 28)
  torch::Tensor targets;  // (steps, global batch)
};

Data make_data(int global_batch) {
  torch::manual_seed(1234);
  return {torch::randn({kSteps, global_batch, 1, 28, 28}), torch::randint(0, 10, {kSteps, global_batch})};
}

struct EquivalenceCase {
  std::string model;
  int ranks;
  int accumulation_steps;
  WorldRunner world;
  std::string backend;
};

std::string case_name(const ::testing::TestParamInfo<EquivalenceCase>& info) {
  const auto& c = info.param;
  return c.model + "_" + std::to_string(c.ranks) + "ranks_accum" + std::to_string(c.accumulation_steps) +
         "_" + c.backend;
}

class DataParallelEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(DataParallelEquivalence, MatchesLocalTrainingOnTheGlobalBatch) {
  const auto& c = GetParam();
  const int global_batch = c.ranks * kPerRankBatch;
  const auto data = make_data(global_batch);

  for (const std::string optimizer_name : {"sgd", "adam"}) {
    SCOPED_TRACE(optimizer_name);
    // Adam divides by sqrt(v): in float32 the rounding of a near-zero gradient entry (summation
    // order differs between one batch and N slices) can move its update by up to lr, which reads as
    // ~1e-4 relative after 20 steps on lenet5. Float64 isolates the mathematics, which must agree.
    const auto dtype = optimizer_name == "adam" ? torch::kDouble : torch::kFloat;
    const auto inputs = data.inputs.to(dtype);
    auto reference = make_model(c.model, 7);
    reference.module->to(dtype);
    {
      LocalStrategy local(reference.module, reference.forward);
      auto opt = make_optimizer(optimizer_name, *reference.module);
      for (int s = 0; s < kSteps; ++s) local.train_step(inputs[s], data.targets[s], cross_entropy, *opt);
    }
    const auto expected = snapshot(*reference.module);

    // Rank r starts from seed 7 + r: only rank 0 starts like the reference, the broadcast must do the rest.
    std::vector<TestModel> models;
    for (int r = 0; r < c.ranks; ++r) {
      models.push_back(make_model(c.model, 7 + r));
      models.back().module->to(dtype);
    }
    std::vector<double> losses(c.ranks);
    c.world(c.ranks, [&](comm::CommunicatorPtr comm) {
      const int r = comm->rank();
      DataParallelStrategyOptions options;
      options.accumulation_steps = c.accumulation_steps;
      DataParallelStrategy dp(models[r].module, models[r].forward, comm, options);
      auto opt = make_optimizer(optimizer_name, *models[r].module);
      for (int s = 0; s < kSteps; ++s) {
        const auto rows = torch::indexing::Slice(r * kPerRankBatch, (r + 1) * kPerRankBatch);
        auto result =
            dp.train_step(inputs[s].index({rows}), data.targets[s].index({rows}), cross_entropy, *opt);
        losses[r] = result.loss;
        EXPECT_EQ(result.samples, kPerRankBatch);
        EXPECT_EQ(result.outputs.size(0), kPerRankBatch);
      }
    });
    for (int r = 0; r < c.ranks; ++r) {
      const double diff = max_relative_difference(snapshot(*models[r].module), expected);
      EXPECT_LE(diff, 1e-5) << "rank " << r;
      // The reported loss is the global mean, so every rank reports the same value.
      EXPECT_DOUBLE_EQ(losses[r], losses[0]);
    }
  }
}

void gloo_world(int n, const std::function<void(comm::CommunicatorPtr)>& fn) {
  ::dtrain::testing::run_world(n, fn);
}

std::vector<EquivalenceCase> equivalence_cases() {
  std::vector<EquivalenceCase> cases;
  for (const std::string model : {"mlp", "lenet5"}) {
    for (int ranks : {2, 4}) {
      for (int accumulation : {1, 2}) {
        cases.push_back({model, ranks, accumulation, gloo_world, "gloo"});
        // The in-process double also fails if the ranks' collectives ever differ.
        cases.push_back({model, ranks, accumulation, run_in_process_world, "inprocess"});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Ranks, DataParallelEquivalence, ::testing::ValuesIn(equivalence_cases()), case_name);

TEST(LocalStrategy, AccumulationMatchesOneBigBatch) {
  const auto data = make_data(8);
  auto whole = make_model("lenet5", 3);
  auto split = make_model("lenet5", 3);
  LocalStrategy a(whole.module, whole.forward);
  LocalStrategy b(split.module, split.forward, LocalOptions{3});  // 8 rows in micro-batches of 3, 3, 2
  auto opt_a = make_optimizer("sgd", *whole.module);
  auto opt_b = make_optimizer("sgd", *split.module);
  for (int s = 0; s < 5; ++s) {
    const auto ra = a.train_step(data.inputs[s], data.targets[s], cross_entropy, *opt_a);
    const auto rb = b.train_step(data.inputs[s], data.targets[s], cross_entropy, *opt_b);
    EXPECT_NEAR(ra.loss, rb.loss, 1e-5 * std::abs(ra.loss));
    EXPECT_EQ(rb.outputs.size(0), 8);
  }
  EXPECT_LE(max_relative_difference(snapshot(*split.module), snapshot(*whole.module)), 1e-5);
}

TEST(LocalStrategy, WorksWithLbfgsClosures) {
  const auto data = make_data(8);
  auto m = make_model("mlp", 5);
  LocalStrategy local(m.module, m.forward);
  torch::optim::LBFGS opt(m.module->parameters(), torch::optim::LBFGSOptions(0.5).max_iter(5));
  const double first = local.train_step(data.inputs[0], data.targets[0], cross_entropy, opt).loss;
  double last = first;
  for (int s = 0; s < 5; ++s)
    last = local.train_step(data.inputs[0], data.targets[0], cross_entropy, opt).loss;
  EXPECT_LT(last, first);
}

TEST(DataParallelStrategy, LbfgsStaysIdenticalAcrossRanks) {
  const auto data = make_data(8);
  std::vector<TestModel> models{make_model("mlp", 5), make_model("mlp", 6)};
  auto comms = in_process_group(2);
  run_threads(2, [&](int r) {
    DataParallelStrategy dp(models[r].module, models[r].forward, comms[r]);
    torch::optim::LBFGS opt(models[r].module->parameters(), torch::optim::LBFGSOptions(0.5).max_iter(5));
    const auto rows = torch::indexing::Slice(r * 4, (r + 1) * 4);
    for (int s = 0; s < 3; ++s)
      dp.train_step(data.inputs[s].index({rows}), data.targets[s].index({rows}), cross_entropy, opt);
  });
  EXPECT_EQ(max_relative_difference(snapshot(*models[1].module), snapshot(*models[0].module)), 0.0);
}

TEST(MicroBatches, RangesCoverTheBatchWithNearEqualSlices) {
  using Range = std::pair<std::int64_t, std::int64_t>;
  const auto ranges = micro_batch_ranges(10, 4);
  ASSERT_EQ(ranges.size(), 4u);
  EXPECT_EQ(ranges[0], Range(0, 3));
  EXPECT_EQ(ranges[1], Range(3, 6));
  EXPECT_EQ(ranges[2], Range(6, 8));
  EXPECT_EQ(ranges[3], Range(8, 10));
  EXPECT_THROW(micro_batch_ranges(3, 4), std::invalid_argument);
  EXPECT_THROW(micro_batch_ranges(3, 0), std::invalid_argument);
}

TEST(CreateStrategy, BuildsEachStrategyAndRejectsUnknownNames) {
  auto m = make_model("mlp", 1);
  config::ParallelConfig config;
  config.strategy = "local";
  EXPECT_EQ(create_strategy(config, m.module, m.forward, nullptr)->name(), "local");

  config.strategy = "data_parallel";
  EXPECT_THROW(create_strategy(config, m.module, m.forward, nullptr), std::invalid_argument);
  auto dp = create_strategy(config, m.module, m.forward, in_process_group(1)[0]);
  EXPECT_EQ(dp->name(), "data_parallel");
  EXPECT_EQ(dp->world_size(), 1);

  config.strategy = "zero";
  try {
    create_strategy(config, m.module, m.forward, nullptr);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("local, data_parallel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::parallel
