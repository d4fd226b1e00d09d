// The Strategy contract beyond equivalence: the registry (names from one place, errors listing
// them), checkpoints that one strategy saves and another world size or strategy continues from,
// communication statistics that count the strategy's own traffic only, each step's bytes sent and
// time split, and micro-batch splitting.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"
#include "dtrain/util/Clock.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

config::RunConfig config_with(const std::vector<std::string>& overrides) {
  std::vector<std::string> all{"model.name=mlp", "model.hidden=[16]", "optim.name=adam", "optim.lr=0.01"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_run_config("", "<strategy test>", all);
}

models::NetworkPtr mlp(const config::RunConfig& cfg, std::uint64_t seed) {
  torch::manual_seed(seed);
  return models::create_model(cfg.model, models::InputSpec::image(1, 28, 28, 10));
}

std::unique_ptr<Strategy> make(const config::RunConfig& cfg, models::NetworkPtr model,
                               comm::CommunicatorPtr comm) {
  return create_strategy(StrategyContext{std::move(model), optim::optimizer_factory(cfg.optim),
                                         optim::create_loss(cfg.optim.loss), std::move(comm), cfg.parallel});
}

struct Batches {
  torch::Tensor inputs;   // (steps, global batch, 1, 28, 28)
  torch::Tensor targets;  // (steps, global batch)
};

Batches batches(int steps, int global_batch) {
  torch::manual_seed(99);
  return {torch::randn({steps, global_batch, 1, 28, 28}), torch::randint(0, 10, {steps, global_batch})};
}

data::Batch rank_slice(const Batches& b, int step, int rank, int per_rank) {
  const auto rows = torch::indexing::Slice(rank * per_rank, (rank + 1) * per_rank);
  return {b.inputs[step].index({rows}), b.targets[step].index({rows})};
}

TEST(StrategyRegistry, NamesComeFromTheRegistrationsAndUnknownOnesListThem) {
  std::vector<std::string> names;
  for (const auto& info : registered_strategies()) names.push_back(info.name);
  EXPECT_EQ(config::registered_choices(config::kStrategyKey).names(), names);
  ASSERT_NE(std::find(names.begin(), names.end(), "local"), names.end());
  ASSERT_NE(std::find(names.begin(), names.end(), "data_parallel"), names.end());
  try {
    find_strategy("zero-7");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "unknown parallel.strategy 'zero-7'; expected one of " +
                                         config::registered_choices(config::kStrategyKey).list());
  }
  EXPECT_EQ(find_strategy("Data_Parallel").name, "data_parallel");  // case does not matter
}

TEST(StrategyRegistry, AStrategyThatCommunicatesRefusesToRunWithoutACommunicator) {
  const auto cfg = config_with({"parallel.strategy=data_parallel"});
  try {
    make(cfg, mlp(cfg, 1), nullptr);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.strategy data_parallel needs a communicator"),
              std::string::npos);
  }
  EXPECT_EQ(make(config_with({"parallel.strategy=local"}), mlp(cfg, 1), nullptr)->name(), "local");
}

// A communicator that says it is nccl, to see what the strategies refuse before they communicate.
class CallsItselfNccl final : public dtrain::testing::InProcessCommunicator {
 public:
  using InProcessCommunicator::InProcessCommunicator;
  std::string backend() const override { return "nccl"; }
};

// What the built-in strategies declare, which the checks outside parallel/ and the sweeps over
// registered strategies read (elastic: tests/run/ElasticWorkerTest.cpp).
TEST(StrategyRegistry, BuiltInStrategiesDeclareWhatTheyCanDo) {
  struct Declared {
    const char* name;
    bool cuda_graph, fp16, lbfgs, wire_compression;
  };
  for (const auto& d :
       {Declared{"local", true, true, true, false}, Declared{"data_parallel", false, true, true, true},
        Declared{"dad", false, true, true, false}, Declared{"rankdad", false, true, true, false},
        Declared{"zero", false, true, false, false}, Declared{"pipeline", false, true, false, false},
        Declared{"decentralized", false, true, false, false}}) {
    const auto& can = find_strategy(d.name).capabilities;
    EXPECT_EQ(can.cuda_graph, d.cuda_graph) << d.name;
    EXPECT_EQ(can.fp16, d.fp16) << d.name;
    EXPECT_EQ(can.lbfgs, d.lbfgs) << d.name;
    EXPECT_EQ(can.wire_compression, d.wire_compression) << d.name;
  }
  EXPECT_EQ(strategy_info("ddp"), &find_strategy("data_parallel"));  // aliases resolve
  EXPECT_EQ(strategy_info("not_registered"), nullptr);
}

// host_point_to_point as the strategies declare it: pipeline always; decentralized only with
// asynchronous gossip (a synchronous round is one batch, which nccl groups). Those refuse nccl and
// stay on a host transport on a GPU; every other strategy hands the GPU's tensors to nccl.
TEST(StrategyRegistry, PointToPointNcclCannotCarryIsRefusedAndStaysOffItOnAGpu) {
  const auto synchronous = config_with({"parallel.strategy=decentralized"});
  const auto asynchronous =
      config_with({"parallel.strategy=decentralized", "parallel.decentralized.asynchronous=true"});
  const auto pipeline = config_with({"parallel.strategy=pipeline"});
  EXPECT_TRUE(collectives_on_gpu(config::Device::Cuda, synchronous.parallel));
  EXPECT_FALSE(collectives_on_gpu(config::Device::Cuda, asynchronous.parallel));
  EXPECT_FALSE(collectives_on_gpu(config::Device::Cuda, pipeline.parallel));
  for (const auto& info : registered_strategies()) {
    const auto cfg = config_with({"parallel.strategy=" + info.name});
    EXPECT_FALSE(collectives_on_gpu(config::Device::Cpu, cfg.parallel)) << info.name;
    if (info.name == "pipeline" || info.name == "decentralized") continue;
    EXPECT_FALSE(info.host_point_to_point) << info.name;
    EXPECT_TRUE(collectives_on_gpu(config::Device::Cuda, cfg.parallel)) << info.name;
  }
  for (const auto* cfg : {&pipeline, &asynchronous}) {
    auto hub = std::make_shared<dtrain::testing::Hub>(2);
    try {
      make(*cfg, mlp(*cfg, 1), std::make_shared<CallsItselfNccl>(hub, 0));
      FAIL() << cfg->parallel.strategy << " accepted nccl";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("use parallel.backend: gloo or mpi"), std::string::npos)
          << e.what();
    }
  }
}

TEST(StrategyRegistry, OptionsReachTheStrategyThroughItsSection) {
  const auto cfg = config_with({"parallel.strategy=data_parallel", "parallel.data_parallel.bucket_mb=0.001"});
  EXPECT_DOUBLE_EQ(cfg.parallel.options.get<DataParallelStrategyOptions>("data_parallel").bucket_mb, 0.001);
  auto comm = dtrain::testing::in_process_group(1)[0];
  auto strategy = make(cfg, mlp(cfg, 1), comm);
  auto& dp = dynamic_cast<DataParallelStrategy&>(*strategy).data_parallel();
  // mlp [16], in reverse order: the output bias and weight and the hidden bias (744 bytes) fit in
  // 1048 bytes, the hidden weight (50 KB) does not: two buckets where the default 25 MB makes one.
  EXPECT_EQ(dp.bucket_parameter_names().size(), 2u);
  EXPECT_EQ(dp.options().bucket_mb, 0.001);
}

// data_parallel on 2 ranks for 4 steps, saved; then (a) data_parallel on 2 ranks and (b) local on
// one process with the union batch continue from the checkpoint for 4 more steps: both end where
// 8 uninterrupted steps of local training end, so model and Adam state crossed over whole.
TEST(StrategyCheckpoint, DataParallelStateContinuesUnderLocalAndAtAnotherWorldSize) {
  const auto dp_cfg = config_with({"parallel.strategy=data_parallel"});
  const auto local_cfg = config_with({"parallel.strategy=local"});
  const auto data = batches(8, 8);
  auto straight = make(local_cfg, mlp(local_cfg, 5), nullptr);
  for (int s = 0; s < 8; ++s) straight->train_step({data.inputs[s], data.targets[s]});
  const auto expected = straight->model_state();

  io::Checkpoint saved;
  std::vector<models::NetworkPtr> models{mlp(dp_cfg, 5), mlp(dp_cfg, 6)};
  std::vector<std::map<std::string, torch::Tensor>> continued(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto first = make(dp_cfg, models[r], comm);
    for (int s = 0; s < 4; ++s) first->train_step(rank_slice(data, s, r, 4));
    io::Checkpoint mine;
    first->save(mine);
    if (r == 0) saved = mine;
    comm->barrier();
    auto second = make(dp_cfg, mlp(dp_cfg, 40 + r), comm);
    second->load(saved);
    for (int s = 4; s < 8; ++s) second->train_step(rank_slice(data, s, r, 4));
    continued[r] = second->model_state();
  });
  ASSERT_TRUE(saved.contains("optimizer/layers.1.weight/exp_avg")) << "Adam's moments by parameter name";
  auto local = make(local_cfg, mlp(local_cfg, 77), nullptr);
  local->load(saved);
  for (int s = 4; s < 8; ++s) local->train_step({data.inputs[s], data.targets[s]});
  const auto local_end = local->model_state();
  for (const auto& [name, value] : expected) {
    EXPECT_LE(testing::max_relative_difference({local_end.at(name)}, {value}), 1e-5) << "local " << name;
    for (int r = 0; r < 2; ++r) {
      EXPECT_LE(testing::max_relative_difference({continued[r].at(name)}, {value}), 1e-5)
          << "rank " << r << " " << name;
    }
  }
}

TEST(StrategyCheckpoint, OptimizerStateOfAnotherShapeIsRefusedNamingIt) {
  const auto cfg = config_with({"parallel.strategy=local"});
  auto strategy = make(cfg, mlp(cfg, 1), nullptr);
  const auto data = batches(1, 4);
  strategy->train_step({data.inputs[0], data.targets[0]});
  io::Checkpoint checkpoint;
  strategy->save(checkpoint);
  checkpoint.set_tensor("optimizer/layers.1.weight/exp_avg", torch::zeros({3, 3}));
  auto other = make(cfg, mlp(cfg, 2), nullptr);
  try {
    other->load(checkpoint);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.weight/exp_avg has shape [3, 3]"), std::string::npos)
        << e.what();
  }
}

TEST(StrategyCommunication, CountsTheStrategysOwnTrafficOnly) {
  const auto cfg = config_with({"parallel.strategy=data_parallel"});
  std::vector<models::NetworkPtr> models{mlp(cfg, 1), mlp(cfg, 1)};
  std::vector<comm::CommStats> own(2), all(2);
  const auto data = batches(3, 8);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = make(cfg, models[r], comm);
    for (int s = 0; s < 3; ++s) {
      strategy->train_step(rank_slice(data, s, r, 4));
      auto metric = torch::ones({5});
      comm->allreduce(metric);  // the trainer's, not the strategy's
    }
    own[r] = strategy->comm_stats();
    all[r] = comm->stats();
  });
  for (int r = 0; r < 2; ++r) {
    // One all-reduce per step: the single bucket, with the loss riding along.
    EXPECT_EQ(own[r].ops.at("allreduce").calls, 3u) << "rank " << r;
    EXPECT_EQ(all[r].ops.at("allreduce").calls, 6u) << "rank " << r;
    // Construction: the module check (all-gather) and rank 0's weights (broadcast) are its own.
    EXPECT_EQ(own[r].ops.at("broadcast").calls, 1u);
    EXPECT_EQ(own[r].ops.at("allgather").calls, 1u);
  }
}

// What Gloo's ring all-reduce (c10d's, below 1 MiB) makes `rank` of n send for `bytes` of floats:
// 2n segments of ceil(bytes / 2n) rounded up to whole floats, chunk c being segments 2c and 2c + 1
// clipped to the buffer; the reduce-scatter sends every chunk but the rank's own, the all-gather
// every chunk but the previous rank's.
std::uint64_t gloo_ring_bytes(std::uint64_t bytes, int rank, int n) {
  const std::uint64_t segment = ((bytes + 2 * n - 1) / (2 * n) + 3) / 4 * 4;
  auto chunk = [&](std::uint64_t c) {
    return std::min(bytes, (c + 1) * 2 * segment) - std::min(bytes, c * 2 * segment);
  };
  return 2 * bytes - chunk(rank) - chunk((rank + n - 1) % n);
}

// The phases of a step that took `wall` seconds around train_step.
void expect_phases_fit(const StepTiming& t, double wall, const std::string& where) {
  EXPECT_GT(t.forward, 0.0) << where;
  EXPECT_GT(t.backward, 0.0) << where;
  EXPECT_GE(t.communication, 0.0) << where;
  EXPECT_GE(t.update, 0.0) << where;
  EXPECT_LE(t.total(), wall) << where;
}

struct RankSteps {
  std::vector<StepResult> steps;
  std::vector<double> walls;         // seconds around each train_step
  std::vector<comm::CommStats> own;  // the strategy's traffic in each step
};

// `steps` data_parallel steps on n gloo ranks, each rank on its slice of a global batch of 4n.
std::vector<RankSteps> data_parallel_steps(const config::RunConfig& cfg, int n, int steps) {
  std::vector<RankSteps> out(n);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < n; ++r) models.push_back(mlp(cfg, 1));
  const auto data = batches(steps, 4 * n);
  dtrain::testing::run_world(n, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = make(cfg, models[r], comm);
    for (int s = 0; s < steps; ++s) {
      const auto before = strategy->comm_stats();
      const auto start = util::Clock::now();
      out[r].steps.push_back(strategy->train_step(rank_slice(data, s, r, 4)));
      out[r].walls.push_back(util::seconds_since(start));
      out[r].own.push_back(comm::difference(strategy->comm_stats(), before));
    }
  });
  return out;
}

// mlp [15] on 28x28 images: 11,935 parameters, all in one gradient bucket that also carries the
// loss in DataParallel::kMaxCarriedValues float slots; the bucket's all-reduce is the step's only
// communication, with or without gradient accumulation (only the last micro-batch synchronises).
TEST(StrategyCommunication, DataParallelStepSendsWhatGloosRingAllreduceSends) {
  const std::uint64_t payload = 4 * (784 * 15 + 15 + 15 * 10 + 10 + DataParallel::kMaxCarriedValues);
  for (const int n : {2, 3}) {
    for (const char* accumulation : {"1", "2"}) {
      const auto cfg = config_with({"parallel.strategy=data_parallel", "model.hidden=[15]",
                                    std::string("parallel.accumulation_steps=") + accumulation});
      const auto ranks = data_parallel_steps(cfg, n, 3);
      for (int r = 0; r < n; ++r) {
        for (std::size_t s = 0; s < 3; ++s) {
          const std::string where = "rank " + std::to_string(r) + " of " + std::to_string(n) + ", step " +
                                    std::to_string(s) + ", accumulation " + accumulation;
          const auto& step = ranks[r].steps[s];
          ASSERT_EQ(ranks[r].own[s].ops.at("allreduce").bytes, payload) << where;
          EXPECT_EQ(step.bytes_sent, gloo_ring_bytes(payload, r, n)) << where;
          EXPECT_EQ(step.bytes_sent, ranks[r].own[s].total().wire_bytes) << where;
          expect_phases_fit(step.timing, ranks[r].walls[s], where);
          EXPECT_GT(step.timing.communication, 0.0)
              << where << ": the last bucket's all-reduce is waited for";
        }
      }
      if (n == 3) {  // 47,772 bytes in chunks of 15,928, 15,928 and 15,916 bytes, by hand
        EXPECT_EQ(ranks[0].steps[0].bytes_sent, 63700u);
        EXPECT_EQ(ranks[1].steps[0].bytes_sent, 63688u);
        EXPECT_EQ(ranks[2].steps[0].bytes_sent, 63700u);
      }
    }
  }
}

// L-BFGS evaluates the closure, and so all-reduces the bucket, several times in one step: the
// step's bytes and phases add up every evaluation.
TEST(StrategyCommunication, DataParallelStepWithLbfgsCountsEveryClosureEvaluation) {
  const auto cfg = config_with(
      {"parallel.strategy=data_parallel", "optim.name=lbfgs", "optim.lr=0.1", "optim.lbfgs_max_iter=4"});
  const auto ranks = data_parallel_steps(cfg, 2, 2);
  const std::uint64_t payload = 4 * (784 * 16 + 16 + 16 * 10 + 10 + DataParallel::kMaxCarriedValues);
  for (int r = 0; r < 2; ++r) {
    for (std::size_t s = 0; s < 2; ++s) {
      const auto evaluations = ranks[r].own[s].ops.at("allreduce").calls;
      EXPECT_GT(evaluations, 1u) << "rank " << r << " step " << s;
      EXPECT_EQ(ranks[r].steps[s].bytes_sent, evaluations * gloo_ring_bytes(payload, r, 2));
      expect_phases_fit(ranks[r].steps[s].timing, ranks[r].walls[s], "rank " + std::to_string(r));
    }
  }
}

TEST(LocalStrategy, StepSendsNothingAndItsPhasesFitItsWallTime) {
  for (const char* optimizer : {"adam", "lbfgs"}) {
    const auto cfg = config_with(
        {"parallel.strategy=local", std::string("optim.name=") + optimizer, "parallel.accumulation_steps=2"});
    auto strategy = make(cfg, mlp(cfg, 3), nullptr);
    const auto data = batches(3, 8);
    for (int s = 0; s < 3; ++s) {
      const auto start = util::Clock::now();
      const auto result = strategy->train_step({data.inputs[s], data.targets[s]});
      const double wall = util::seconds_since(start);
      EXPECT_EQ(result.bytes_sent, 0u);
      EXPECT_EQ(result.timing.communication, 0.0);
      expect_phases_fit(result.timing, wall, optimizer);
    }
  }
}

// ZeRO's accounting for a replica (Rajbhandari et al. 2020, §3): parameters 4Ψ, gradients 4Ψ,
// Adam 8Ψ, sgd with momentum 4Ψ; before the first step no optimizer state and no gradients.
TEST(StrategyMemory, ReplicaFootprintIsZerosAccounting) {
  const auto data = batches(1, 8);
  for (const auto& [optimizer, state_per_parameter] :
       std::vector<std::pair<std::string, std::uint64_t>>{{"adam", 8}, {"sgd", 4}}) {
    auto overrides = std::vector<std::string>{"parallel.strategy=local", "optim.name=" + optimizer};
    if (optimizer == "sgd") overrides.push_back("optim.momentum=0.9");
    const auto cfg = config_with(overrides);
    auto model = mlp(cfg, 3);
    std::uint64_t psi = 0;
    for (const auto& p : model->parameters()) psi += static_cast<std::uint64_t>(p.numel());
    auto strategy = make(cfg, model, nullptr);
    const auto before = strategy->memory_footprint();
    EXPECT_EQ(before.parameters, 4 * psi);
    EXPECT_EQ(before.optimizer_state, 0u) << optimizer;
    // What the run plans before the first step is what the step then holds.
    const auto planned = strategy->planned_footprint();
    EXPECT_EQ(planned.parameters, 4 * psi) << optimizer;
    EXPECT_EQ(planned.gradients, 4 * psi) << optimizer;
    EXPECT_EQ(planned.optimizer_state, state_per_parameter * psi) << optimizer;
    strategy->train_step({data.inputs[0], data.targets[0]});
    const auto after = strategy->memory_footprint();
    EXPECT_EQ(after.parameters, 4 * psi) << optimizer;
    EXPECT_EQ(after.gradients, 4 * psi) << optimizer;
    EXPECT_EQ(after.optimizer_state, state_per_parameter * psi) << optimizer;
    EXPECT_EQ(after.total(), after.parameters + after.gradients + after.optimizer_state);
  }
}

TEST(LocalStrategy, AccumulationMatchesOneBigBatch) {
  const auto whole_cfg = config_with({"parallel.strategy=local", "optim.name=sgd", "optim.lr=0.05"});
  const auto split_cfg = config_with(
      {"parallel.strategy=local", "optim.name=sgd", "optim.lr=0.05", "parallel.accumulation_steps=3"});
  const auto data = batches(5, 8);
  auto whole = make(whole_cfg, mlp(whole_cfg, 3), nullptr);
  auto split = make(split_cfg, mlp(split_cfg, 3), nullptr);  // 8 rows in micro-batches of 3, 3, 2
  for (int s = 0; s < 5; ++s) {
    const auto a = whole->train_step({data.inputs[s], data.targets[s]});
    const auto b = split->train_step({data.inputs[s], data.targets[s]});
    EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::abs(a.loss));
    EXPECT_EQ(b.outputs.size(0), 8);
  }
  const auto a = whole->model_state();
  const auto b = split->model_state();
  for (const auto& [name, value] : a)
    EXPECT_LE(testing::max_relative_difference({b.at(name)}, {value}), 1e-5) << name;
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

}  // namespace
}  // namespace dtrain::parallel
