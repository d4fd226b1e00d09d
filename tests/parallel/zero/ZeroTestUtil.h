// The zero tests' shared pieces: configurations of an mlp whose units do not divide evenly, the
// steps' data and each rank's slice of it, and training a configuration on ranks as threads over
// gloo (ZeroTest.cpp, HsdpTest.cpp).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel::zero_test {

using State = std::map<std::string, torch::Tensor>;
using dtrain::parallel::testing::max_abs_difference;

// mlp [31] on 1x28x28 with 10 classes: units of 784*31+31 = 24,335 and 31*10+10 = 320 elements;
// 24,335 is odd and leaves a remainder at 2, 3 and 4 ranks, 320 at 3.
inline config::RunConfig config_of(const std::string& strategy, const std::string& optimizer,
                                   std::vector<std::string> overrides = {}) {
  overrides.push_back("parallel.strategy=" + strategy);
  overrides.push_back("optim.name=" + optimizer);
  if (optimizer == "sgd") overrides.insert(overrides.end(), {"optim.lr=0.05", "optim.momentum=0.9"});
  if (optimizer == "adam") overrides.push_back("optim.lr=0.001");
  if (optimizer == "adamw") overrides.insert(overrides.end(), {"optim.lr=0.001", "optim.weight_decay=0.1"});
  overrides.insert(overrides.end(), {"model.name=mlp", "model.hidden=[31]"});
  return config::parse_run_config("", "<zero test>", overrides);
}

inline config::RunConfig zero_config(int stage, const std::string& optimizer,
                                     std::vector<std::string> overrides = {}) {
  overrides.push_back("parallel.zero.stage=" + std::to_string(stage));
  return config_of("zero", optimizer, std::move(overrides));
}

struct Data {
  torch::Tensor inputs;   // (steps, global batch, 1, 28, 28)
  torch::Tensor targets;  // (steps, global batch)
};

constexpr int kGlobalBatch = 12;  // divides among 2, 3 and 4 ranks

inline Data data_of(int steps, torch::Dtype dtype) {
  torch::manual_seed(1234);
  return {torch::randn({steps, kGlobalBatch, 1, 28, 28}).to(dtype),
          torch::randint(0, 10, {steps, kGlobalBatch})};
}

inline data::Batch rank_slice(const Data& data, int step, int rank, int ranks) {
  const int per_rank = kGlobalBatch / ranks;
  const auto rows = torch::indexing::Slice(rank * per_rank, (rank + 1) * per_rank);
  return {data.inputs[step].index({rows}), data.targets[step].index({rows})};
}

// Steps [first, last) of `cfg` on `ranks` ranks over gloo, each rank's model from seed 7 + rank
// (the strategy must broadcast rank 0's), optionally loading `resume` first and saving into
// `saved` (rank 0's) at the end; returns rank 0's model state and checks every rank agrees.
inline State train(const config::RunConfig& cfg, int ranks, const Data& data, int first, int last,
                   torch::Dtype dtype, const io::Checkpoint* resume = nullptr,
                   io::Checkpoint* saved = nullptr, optim::Precision precision = optim::Precision::Fp32,
                   std::vector<double>* losses = nullptr) {
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < ranks; ++r) models.push_back(testing::build_model(cfg, 7 + r, dtype));
  std::vector<State> ends(ranks);
  dtrain::testing::run_world(ranks, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    StrategyContext context{models[r], optim::optimizer_factory(cfg.optim),
                            optim::create_loss(cfg.optim.loss), comm, cfg.parallel};
    context.precision = precision;
    auto strategy = create_strategy(std::move(context));
    if (resume) strategy->load(*resume);
    for (int s = first; s < last; ++s) {
      const auto result = strategy->train_step(rank_slice(data, s, r, ranks));
      EXPECT_EQ(result.samples, kGlobalBatch / ranks);
      EXPECT_EQ(result.outputs.size(0), kGlobalBatch / ranks);
      if (losses && r == 0) losses->push_back(result.loss);
    }
    ends[r] = strategy->model_state();
    if (saved) {
      io::Checkpoint mine;
      strategy->save(mine);
      if (r == 0) *saved = mine;
    }
  });
  for (int r = 1; r < ranks; ++r) {
    for (const auto& [name, value] : ends[0])
      EXPECT_TRUE(torch::equal(ends[r].at(name), value)) << "rank " << r << " " << name;
  }
  return ends[0];
}

}  // namespace dtrain::parallel::zero_test
