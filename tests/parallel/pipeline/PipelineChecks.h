// The pipeline's test data and its check against one process, shared by the tests whose ranks are
// threads over gloo (PipelineTest.cpp) and those with a process per rank under mpirun
// (tests/parallel/mpi/PipelineMpiTest.cpp).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "parallel/ParallelTestUtil.h"

namespace dtrain::parallel::pipeline::checks {

using parallel::testing::max_abs_difference;

// mlp [16, 16]: Flatten, Linear(784, 16), ReLU, Linear(16, 16), ReLU, Linear(16, 10): six layers.
inline config::RunConfig config_of(const std::string& strategy, const std::string& optimizer,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> overrides{"parallel.strategy=" + strategy, "optim.name=" + optimizer,
                                     "model.name=mlp", "model.hidden=[16, 16]"};
  if (optimizer == "sgd") overrides.insert(overrides.end(), {"optim.lr=0.05", "optim.momentum=0.9"});
  if (optimizer == "adam") overrides.push_back("optim.lr=0.01");
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return config::parse_run_config("", "<pipeline test>", overrides);
}

inline std::vector<std::string> pipeline_options(ScheduleKind schedule, int stages, int micro_batches) {
  return {"parallel.pipeline.schedule=" + kScheduleNames.name(schedule),
          "parallel.pipeline.stages=" + std::to_string(stages),
          "parallel.pipeline.micro_batches=" + std::to_string(micro_batches)};
}

struct Data {
  torch::Tensor inputs;   // (steps, world * per_rank, 1, 28, 28)
  torch::Tensor targets;  // (steps, world * per_rank)
};

inline Data make_data(int steps, int rows, torch::Dtype dtype) {
  torch::manual_seed(1234);
  return {torch::randn({steps, rows, 1, 28, 28}).to(dtype), torch::randint(0, 10, {steps, rows})};
}

inline data::Batch slice(const Data& d, int step, int rank, int per_rank) {
  const auto rows = torch::indexing::Slice(rank * per_rank, (rank + 1) * per_rank);
  return {d.inputs[step].index({rows}), d.targets[step].index({rows})};
}

// One rank of a pipeline world whose ranks are processes (stages = the world's size, one replica):
// kSteps steps of `schedule` with M micro-batches, and this rank's parameters and losses against
// those of one process trained here on the global batches.
inline void expect_rank_equals_local(const comm::CommunicatorPtr& comm, ScheduleKind schedule,
                                     int micro_batches, const std::string& optimizer) {
  constexpr int kSteps = 3;
  constexpr int kPerRank = 3;
  const int world = comm->size();
  const int r = comm->rank();
  const auto dtype = optimizer == "adam" ? torch::kDouble : torch::kFloat;
  const auto data = make_data(kSteps, world * kPerRank, dtype);
  const auto local_cfg = config_of("local", optimizer);
  auto reference = parallel::testing::build_strategy(
      local_cfg, parallel::testing::build_model(local_cfg, 7, dtype), nullptr);
  std::vector<double> expected_losses;
  for (int s = 0; s < kSteps; ++s)
    expected_losses.push_back(reference->train_step({data.inputs[s], data.targets[s]}).loss);
  const auto expected = reference->model_state();

  const auto cfg = config_of("pipeline", optimizer, pipeline_options(schedule, world, micro_batches));
  auto strategy =
      parallel::testing::build_strategy(cfg, parallel::testing::build_model(cfg, 7 + r, dtype), comm);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(strategy->train_step(slice(data, s, r, kPerRank)).loss, expected_losses[s], 1e-5)
        << "rank " << r << " step " << s;
  }
  EXPECT_LE(max_abs_difference(strategy->model_state(), expected), 1e-5) << "rank " << r;
  const int held = dynamic_cast<PipelineStrategy&>(*strategy).peak_held_micro_batches();
  EXPECT_EQ(held, schedule == ScheduleKind::GPipe ? micro_batches : std::min(world - r, micro_batches))
      << "rank " << r;
}

}  // namespace dtrain::parallel::pipeline::checks
