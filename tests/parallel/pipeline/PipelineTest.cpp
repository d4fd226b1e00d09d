// Pipeline parallel (parallel.strategy: pipeline) against one process: the same parameters and
// losses after sgd and adam steps under both schedules, S from 2 to 4, M from 1 to 8 (batches M
// does not divide included) and with two data-parallel replicas; the activations each stage holds;
// where the cuts go; the refusals; evaluation through the pipeline; checkpoints that continue
// under local and at another S; the transfers each stage keeps moving between its layers.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/pipeline/PipelineSchedule.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "dtrain/parallel/pipeline/StagePartition.h"
#include "parallel/ParallelTestUtil.h"
#include "parallel/pipeline/PipelineChecks.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel::pipeline {
namespace {

using Pass = PipelineAction::Pass;
using namespace checks;

// ---------------------------------------------------------------------------------------------
// Equivalence with one process

struct Case {
  ScheduleKind schedule;
  int stages;
  int micro_batches;
  int replicas;
  std::string optimizer;
  int per_rank = 3;  // rows each rank feeds; a pipeline's batch is stages * per_rank
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto& c = info.param;
  return kScheduleNames.name(c.schedule) + "_S" + std::to_string(c.stages) + "_M" +
         std::to_string(c.micro_batches) + "_R" + std::to_string(c.replicas) + "_" + c.optimizer;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << kScheduleNames.name(c.schedule) << " S=" << c.stages << " M=" << c.micro_batches
      << " R=" << c.replicas << " " << c.optimizer;
}

class PipelineEqualsLocal : public ::testing::TestWithParam<Case> {};

constexpr int kSteps = 3;

TEST_P(PipelineEqualsLocal, ParametersLossesOutputsAndHeldActivations) {
  const auto& c = GetParam();
  const int world = c.stages * c.replicas;
  // Adam divides by sqrt(v): float64 keeps rounding near zero from moving an update by lr.
  const auto dtype = c.optimizer == "adam" ? torch::kDouble : torch::kFloat;
  const auto data = make_data(kSteps, world * c.per_rank, dtype);

  const auto local_cfg = config_of("local", c.optimizer);
  auto reference = testing::build_strategy(local_cfg, testing::build_model(local_cfg, 7, dtype), nullptr);
  std::vector<double> expected_losses;
  for (int s = 0; s < kSteps; ++s)
    expected_losses.push_back(reference->train_step({data.inputs[s], data.targets[s]}).loss);
  const auto expected = reference->model_state();
  reference->begin_evaluation();
  const auto expected_eval = reference->eval_forward(0, data.inputs[0]);
  reference->end_evaluation();

  const auto cfg =
      config_of("pipeline", c.optimizer, pipeline_options(c.schedule, c.stages, c.micro_batches));
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) models.push_back(testing::build_model(cfg, 7 + r, dtype));  // rank 0's wins
  std::vector<std::map<std::string, torch::Tensor>> ends(world);
  std::vector<std::vector<double>> losses(world);
  std::vector<int> peaks(world);
  torch::Tensor evaluated;
  dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    auto& pipeline = dynamic_cast<PipelineStrategy&>(*strategy);
    const bool last = pipeline.layout().stage == c.stages - 1;
    for (int s = 0; s < kSteps; ++s) {
      const auto result = strategy->train_step(slice(data, s, r, c.per_rank));
      EXPECT_EQ(result.samples, c.per_rank);
      EXPECT_EQ(result.outputs.defined(), last) << "rank " << r;
      if (last) {
        EXPECT_EQ(result.outputs.size(0), c.per_rank);
      }
      losses[r].push_back(result.loss);
    }
    peaks[r] = pipeline.peak_held_micro_batches();
    ends[r] = strategy->model_state();
    // Evaluation through the first pipeline: its last stage owns the outputs.
    const auto owner = strategy->eval_models().front().owner;
    strategy->begin_evaluation();
    if (r == owner) evaluated = strategy->eval_forward(0, data.inputs[0]);
    strategy->end_evaluation();
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_LE(max_abs_difference(ends[r], expected), 1e-5) << "rank " << r;
    for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(losses[r][s], expected_losses[s], 1e-5) << "rank " << r;
    EXPECT_EQ(losses[r], losses[0]) << "rank " << r;
    const int stage = r % c.stages;
    const int held =
        c.schedule == ScheduleKind::GPipe ? c.micro_batches : std::min(c.stages - stage, c.micro_batches);
    EXPECT_EQ(peaks[r], held) << "rank " << r;
    EXPECT_LE(peaks[r], c.schedule == ScheduleKind::GPipe ? c.micro_batches : c.stages);
  }
  ASSERT_TRUE(evaluated.defined());
  EXPECT_LE((evaluated.to(torch::kDouble) - expected_eval.to(torch::kDouble)).abs().max().item<double>(),
            1e-5);
}

// Every S in 2..4 and every M in 1..8 at least once, batches M does not divide (3 * S rows), and
// two replicas of a two-stage pipeline (world 4).
INSTANTIATE_TEST_SUITE_P(Cases, PipelineEqualsLocal,
                         ::testing::Values(Case{ScheduleKind::GPipe, 2, 1, 1, "sgd"},
                                           Case{ScheduleKind::OneFOneB, 2, 4, 1, "adam"},
                                           Case{ScheduleKind::GPipe, 3, 4, 1, "adam"},
                                           Case{ScheduleKind::OneFOneB, 3, 8, 1, "sgd"},
                                           Case{ScheduleKind::OneFOneB, 4, 5, 1, "adam"},
                                           Case{ScheduleKind::GPipe, 4, 7, 1, "sgd"},
                                           Case{ScheduleKind::GPipe, 3, 6, 1, "sgd"},
                                           Case{ScheduleKind::OneFOneB, 4, 2, 1, "sgd"},
                                           Case{ScheduleKind::OneFOneB, 2, 3, 2, "adam"},
                                           Case{ScheduleKind::GPipe, 2, 5, 2, "sgd"}),
                         case_name);

// train.precision: each stage computes as MixedPrecision computes the whole network (fp16's
// rounding at every layer's input, bf16 autocast), and fp16's skip is agreed by every rank. The
// reference accumulates over the same micro-batches: a bf16 weight gradient is rounded per
// micro-batch, so one 12-row product and three 4-row ones differ in bf16's third digit.
TEST(PipelinePrecision, Fp16AndBf16EqualOneProcessInTheSamePrecision) {
  const auto data = make_data(3, 12, torch::kFloat);
  for (const auto precision : {optim::Precision::Fp16, optim::Precision::Bf16}) {
    const auto local_cfg = config_of("local", "sgd", {"parallel.accumulation_steps=3"});
    auto make = [&](const config::RunConfig& cfg, models::NetworkPtr model, comm::CommunicatorPtr comm) {
      StrategyContext context{std::move(model), optim::optimizer_factory(cfg.optim),
                              optim::create_loss(cfg.optim.loss), std::move(comm), cfg.parallel};
      context.precision = precision;
      return create_strategy(std::move(context));
    };
    auto reference = make(local_cfg, testing::build_model(local_cfg, 7), nullptr);
    std::vector<double> expected_losses;
    for (int s = 0; s < 3; ++s)
      expected_losses.push_back(reference->train_step({data.inputs[s], data.targets[s]}).loss);
    const auto expected = reference->model_state();

    const auto cfg = config_of("pipeline", "sgd", pipeline_options(ScheduleKind::OneFOneB, 2, 3));
    std::vector<models::NetworkPtr> models{testing::build_model(cfg, 7), testing::build_model(cfg, 8)};
    std::vector<std::map<std::string, torch::Tensor>> ends(2);
    std::vector<std::vector<double>> losses(2);
    dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
      const int r = comm->rank();
      auto strategy = make(cfg, models[r], comm);
      for (int s = 0; s < 3; ++s) {
        const auto result = strategy->train_step(slice(data, s, r, 6));
        losses[r].push_back(result.loss);
        if (precision == optim::Precision::Fp16) {
          EXPECT_GT(result.loss_scale, 0.0);
        }
      }
      ends[r] = strategy->model_state();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_LE(max_abs_difference(ends[r], expected), 1e-5) << optim::to_string(precision) << " rank " << r;
      for (int s = 0; s < 3; ++s)
        EXPECT_NEAR(losses[r][s], expected_losses[s], 1e-4) << optim::to_string(precision);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Refusals, each one line naming the key

std::string construction_error(const config::RunConfig& cfg, int world, models::NetworkPtr model = nullptr) {
  std::vector<std::string> errors(world);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) models.push_back(model ? model : testing::build_model(cfg, 1));
  dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
    try {
      testing::build_strategy(cfg, models[comm->rank()], comm);
    } catch (const std::invalid_argument& e) {
      errors[comm->rank()] = e.what();
    }
  });
  return errors[0];
}

TEST(PipelineConfig, BadOptionsAreRefusedNamingTheKey) {
  // Checked without a world: what `dtrain train --nproc` runs before it starts workers.
  const auto holders = [](const std::vector<std::string>& options, int world) {
    try {
      parallel::data_holders(config_of("pipeline", "sgd", options).parallel, world);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(holders({"parallel.pipeline.stages=3"}, 4),
            "parallel.pipeline.stages: 3 stages do not divide the world size 4; the world must be replicas x "
            "stages, so choose stages among the divisors of 4 (or 0 for one pipeline over all ranks)");
  EXPECT_EQ(holders({"parallel.pipeline.cut_points=[2]"}, 2),
            "parallel.pipeline.cut_points: applies to balance: cut_points, not balance: parameters; set "
            "parallel.pipeline.balance: cut_points or leave cut_points out");
  EXPECT_EQ(
      holders({"parallel.pipeline.balance=cut_points", "parallel.pipeline.cut_points=[2, 4]"}, 2),
      "parallel.pipeline.cut_points: 2 stages need 1 cut points (the first layer of stages 1..1), found 2");
  EXPECT_EQ(holders({"parallel.pipeline.stages=2"}, 4), "no error");
  EXPECT_THROW(config_of("pipeline", "sgd", {"parallel.pipeline.schedule=zigzag"}), std::exception);
}

TEST(PipelineOptions, ModelsAndSettingsAPipelineCannotHonourAreRefused) {
  // mlp [] is Flatten and one Linear: two layers.
  auto two_layers = config_of("pipeline", "sgd", {"model.hidden=[]"});
  EXPECT_EQ(construction_error(two_layers, 3),
            "parallel.pipeline.stages: 3 stages but model mlp has 2 layers; use at most 2 stages");
  EXPECT_EQ(construction_error(config_of("pipeline", "sgd", {"parallel.accumulation_steps=2"}), 2)
                .rfind("parallel.accumulation_steps: pipeline splits each batch", 0),
            0u);
  EXPECT_EQ(construction_error(config_of("pipeline", "lbfgs"), 2).rfind("optim.name: lbfgs", 0), 0u);

  // A network whose forward is not its layers in order.
  struct Shortcut : models::Network {
    using models::Network::Network;
    torch::Tensor forward(torch::Tensor x) override { return models::Network::forward(x) * 2; }
  };
  const auto cfg = config_of("pipeline", "sgd");
  torch::manual_seed(1);
  auto plain = testing::build_model(cfg, 1);
  auto shortcut = std::make_shared<Shortcut>("shortcut", plain->layers());
  EXPECT_EQ(construction_error(cfg, 2, shortcut)
                .rfind("parallel.strategy: pipeline cuts a model's sequence of "
                       "layers, but model shortcut computes its forward pass "
                       "otherwise",
                       0),
            0u);

  // A transformer classifier on padded sentences: its stages share the padding mask (Note [Padding
  // beside the activations]).
  const auto classifier = config_of("pipeline", "sgd", {"model={name: transformer, dim: 8, heads: 2}"});
  auto sentences = models::InputSpec::tokens(10, 6, 2);
  sentences.pad_id = 0;
  torch::manual_seed(1);
  EXPECT_EQ(
      construction_error(classifier, 2, models::create_model(classifier.model, sentences))
          .rfind("parallel.strategy: pipeline cuts model transformer into stages on several ranks, but on "
                 "padded sentences",
                 0),
      0u);
}

TEST(PipelineOptions, MicroBatchesBeyondThePipelinesBatchAreRefusedAtTheStep) {
  const auto cfg = config_of("pipeline", "sgd", pipeline_options(ScheduleKind::OneFOneB, 2, 8));
  const auto data = make_data(1, 6, torch::kFloat);
  std::vector<std::string> errors(2);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 1), testing::build_model(cfg, 1)};
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
    try {
      strategy->train_step(slice(data, 0, comm->rank(), 3));
    } catch (const std::invalid_argument& e) {
      errors[comm->rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_EQ(
        e,
        "parallel.pipeline.micro_batches: 8 micro-batches but pipeline 0's batch has 6 samples (its 2 ranks' "
        "batches together); lower micro_batches or raise data.batch_size");
  }
}

TEST(PipelineOptions, CutPointsAndBalanceReachTheStages) {
  for (const auto& [options, bounds] : std::vector<std::pair<std::vector<std::string>, StageBounds>>{
           // Linear(784, 16) is the bottleneck either way; a cut at 3 leaves 3 layers on each side.
           {{"parallel.pipeline.stages=2"}, {0, 3, 6}},
           {{"parallel.pipeline.stages=2", "parallel.pipeline.balance=cut_points",
             "parallel.pipeline.cut_points=[4]"},
            {0, 4, 6}},
           {{"parallel.pipeline.stages=2", "parallel.pipeline.balance=time"}, {}}}) {
    const auto cfg = config_of("pipeline", "sgd", options);
    std::vector<models::NetworkPtr> models{testing::build_model(cfg, 1), testing::build_model(cfg, 1)};
    std::vector<StageBounds> seen(2);
    std::vector<MemoryFootprint> footprints(2), planned(2);
    std::vector<std::string> notes(2);
    dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
      auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
      seen[comm->rank()] = dynamic_cast<PipelineStrategy&>(*strategy).layout().bounds;
      footprints[comm->rank()] = strategy->memory_footprint();
      planned[comm->rank()] = strategy->planned_footprint();
      notes[comm->rank()] = strategy->notes().at("pipeline/stages");
    });
    EXPECT_EQ(seen[0], seen[1]);  // time: rank 0's measurement decides for both
    if (!bounds.empty()) {
      EXPECT_EQ(seen[0], bounds);
    }
    EXPECT_EQ(seen[0].front(), 0);
    EXPECT_EQ(seen[0].back(), 6);
    // Each rank holds its stage's parameters only: together the model's (4 bytes each).
    const double total = static_cast<double>(models::parameter_count(*testing::build_model(cfg, 1))) * 4.0;
    EXPECT_EQ(static_cast<double>(footprints[0].parameters + footprints[1].parameters), total);
    for (int r = 0; r < 2; ++r) {
      // Planned: the stage's parameters, a gradient for each.
      EXPECT_EQ(planned[r].parameters, footprints[r].parameters);
      EXPECT_EQ(planned[r].gradients, footprints[r].parameters);
    }
    EXPECT_NE(notes[0].find("stage 0: layers 0-"), std::string::npos) << notes[0];
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints move between pipeline and the other strategies

// Runs `steps` steps of `cfg` on `world` ranks from `start` (a checkpoint, or none), feeding step s
// of `data` from `first`; returns rank 0's checkpoint and the whole model at the end.
struct Run {
  io::Checkpoint checkpoint;
  std::map<std::string, torch::Tensor> state;
};

Run run_strategy(const config::RunConfig& cfg, int world, const Data& data, int first, int steps,
                 const io::Checkpoint* start) {
  const int per_rank = static_cast<int>(data.inputs.size(1)) / world;
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) models.push_back(testing::build_model(cfg, 5, torch::kDouble));
  Run out;
  if (cfg.parallel.strategy == "local") {
    auto strategy = testing::build_strategy(cfg, models[0], nullptr);
    if (start) strategy->load(*start);
    for (int s = first; s < first + steps; ++s) strategy->train_step({data.inputs[s], data.targets[s]});
    strategy->save(out.checkpoint);
    out.state = strategy->model_state();
    return out;
  }
  std::vector<io::Checkpoint> checkpoints(world);
  std::vector<std::map<std::string, torch::Tensor>> states(world);
  dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    if (start) strategy->load(*start);
    for (int s = first; s < first + steps; ++s) strategy->train_step(slice(data, s, r, per_rank));
    strategy->save(checkpoints[r]);
    states[r] = strategy->model_state();
  });
  out.checkpoint = checkpoints[0];
  out.state = states[0];
  return out;
}

// Where the ranks sit: without a mesh a pipeline's stages are consecutive ranks; on parallel.mesh
// {pp: 2, dp_replicate: 2} the mesh's order, pp outermost, so a stage's replicas are consecutive and
// the model's owner (the first pipeline's last stage) is rank 2. StrategyEquivalence's mesh row checks
// that the mathematics does not change.
TEST(PipelineOptions, OnAMeshAStagesReplicasAreConsecutiveRanks) {
  for (const bool mesh : {false, true}) {
    std::vector<std::string> overrides{"parallel.strategy=pipeline", "model.name=mlp", "model.hidden=[16]"};
    if (mesh) {
      overrides.insert(overrides.end(), {"parallel.mesh.pp=2", "parallel.mesh.dp_replicate=2"});
    } else {
      overrides.push_back("parallel.pipeline.stages=2");
    }
    const auto cfg = config::parse_run_config("", "<pipeline test>", overrides);
    std::vector<models::NetworkPtr> models;
    for (int r = 0; r < 4; ++r) models.push_back(testing::build_model(cfg, 1));
    std::vector<int> stages(4), replicas(4), owners(4);
    dtrain::testing::run_world(4, [&](comm::CommunicatorPtr comm) {
      const int r = comm->rank();
      auto strategy = testing::build_strategy(cfg, models[r], comm);
      const auto& layout = dynamic_cast<PipelineStrategy&>(*strategy).layout();
      stages[r] = layout.stage;
      replicas[r] = layout.replica;
      owners[r] = strategy->eval_models().front().owner;
    });
    EXPECT_EQ(stages, mesh ? (std::vector<int>{0, 0, 1, 1}) : (std::vector<int>{0, 1, 0, 1}));
    EXPECT_EQ(replicas, mesh ? (std::vector<int>{0, 1, 0, 1}) : (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(owners, std::vector<int>(4, mesh ? 2 : 1));
  }
}

TEST(PipelineCheckpoint, PipelineResumesAsLocalAndLocalAsPipelineAtAnotherS) {
  const auto data = make_data(4, 12, torch::kDouble);
  const auto local = config_of("local", "adam");
  const auto two = config_of("pipeline", "adam", pipeline_options(ScheduleKind::OneFOneB, 2, 3));
  const auto three = config_of("pipeline", "adam", pipeline_options(ScheduleKind::GPipe, 3, 4));
  // The reference: four steps in one process.
  const auto straight = run_strategy(local, 1, data, 0, 4, nullptr);

  // Two steps as a 2-stage pipeline, saved: the whole model and every stage's Adam state by name.
  const auto first = run_strategy(two, 2, data, 0, 2, nullptr);
  for (const auto& [name, t] : first.state) {
    EXPECT_TRUE(first.checkpoint.contains("model." + name)) << name;
    EXPECT_TRUE(first.checkpoint.contains("optimizer/" + name + "/exp_avg")) << name;
    EXPECT_TRUE(first.checkpoint.contains("optimizer/" + name + "/step")) << name;
  }
  // ... continued by one process for two steps: the reference's parameters.
  const auto as_local = run_strategy(local, 1, data, 2, 2, &first.checkpoint);
  EXPECT_LE(max_abs_difference(as_local.state, straight.state), 1e-5);

  // Two steps in one process, continued as a 3-stage pipeline.
  const auto local_first = run_strategy(local, 1, data, 0, 2, nullptr);
  const auto as_pipeline = run_strategy(three, 3, data, 2, 2, &local_first.checkpoint);
  EXPECT_LE(max_abs_difference(as_pipeline.state, straight.state), 1e-5);

  // ... or by data_parallel on two ranks.
  const auto as_data_parallel =
      run_strategy(config_of("data_parallel", "adam"), 2, data, 2, 2, &first.checkpoint);
  EXPECT_LE(max_abs_difference(as_data_parallel.state, straight.state), 1e-5);

  // And a 2-stage pipeline's checkpoint continued by a 3-stage one.
  const auto as_three = run_strategy(three, 3, data, 2, 2, &first.checkpoint);
  EXPECT_LE(max_abs_difference(as_three.state, straight.state), 1e-5);

  // Two pipelines of 2 stages on parallel.mesh {pp: 2, dp_replicate: 2}, the first pipeline's stages
  // on ranks 0 and 2: its checkpoint, every stage's Adam state included, continued by one process,
  // and the 2-stage pipeline's continued on the mesh.
  auto mesh_options = pipeline_options(ScheduleKind::OneFOneB, 2, 3);
  mesh_options.push_back("parallel.mesh.dp_replicate=2");
  const auto on_mesh = config_of("pipeline", "adam", mesh_options);
  const auto mesh_first = run_strategy(on_mesh, 4, data, 0, 2, nullptr);
  for (const auto& [name, t] : mesh_first.state)
    EXPECT_TRUE(mesh_first.checkpoint.contains("optimizer/" + name + "/exp_avg")) << name;
  EXPECT_LE(
      max_abs_difference(run_strategy(local, 1, data, 2, 2, &mesh_first.checkpoint).state, straight.state),
      1e-5);
  EXPECT_LE(max_abs_difference(run_strategy(on_mesh, 4, data, 2, 2, &first.checkpoint).state, straight.state),
            1e-5);
}

TEST(PipelineMetrics, IdleFractionsAndHeldMicroBatchesPerStage) {
  const auto cfg = config_of("pipeline", "sgd", pipeline_options(ScheduleKind::GPipe, 2, 4));
  const auto data = make_data(3, 16, torch::kFloat);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 1), testing::build_model(cfg, 1)};
  std::vector<std::map<std::string, double>> metrics(2);
  std::vector<std::map<std::string, std::string>> notes(2);
  std::vector<std::uint64_t> bytes(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    for (int s = 0; s < 3; ++s) bytes[r] = strategy->train_step(slice(data, s, r, 8)).bytes_sent;
    metrics[r] = strategy->metrics();
    notes[r] = strategy->notes();
  });
  EXPECT_EQ(metrics[0], metrics[1]);
  for (int s = 0; s < 2; ++s) {
    const double idle = metrics[0].at("pipeline/idle_fraction/stage" + std::to_string(s));
    EXPECT_GE(idle, 0.0);
    EXPECT_LT(idle, 1.0);
    // Every stage computes for part of the schedule and is idle for part of it (the bubble).
    const double schedule_idle = metrics[0].at("pipeline/schedule_idle_fraction/stage" + std::to_string(s));
    EXPECT_GT(schedule_idle, 0.0);
    EXPECT_LT(schedule_idle, 1.0);
    EXPECT_EQ(metrics[0].at("pipeline/peak_micro_batches/stage" + std::to_string(s)), 4.0);
    // The schedule replayed with these passes and free transfers leaves each stage idle too.
    const double replay_idle = metrics[0].at("pipeline/replay_idle_fraction/stage" + std::to_string(s));
    EXPECT_GT(replay_idle, 0.0);
    EXPECT_LT(replay_idle, 1.0);
  }
  EXPECT_GT(metrics[0].at("pipeline/schedule_over_replay"), 0.0);
  EXPECT_DOUBLE_EQ(metrics[0].at("pipeline/expected_idle_fraction"), 1.0 / 5.0);
  // Each stage's compute is 1 - its schedule idle fraction of one schedule time, so the busiest
  // stage over the mean is the largest of those over their mean.
  const double busy0 = 1.0 - metrics[0].at("pipeline/schedule_idle_fraction/stage0");
  const double busy1 = 1.0 - metrics[0].at("pipeline/schedule_idle_fraction/stage1");
  EXPECT_NEAR(metrics[0].at("pipeline/compute_imbalance"), std::max(busy0, busy1) / ((busy0 + busy1) / 2.0),
              1e-9);
  EXPECT_GE(metrics[0].at("pipeline/compute_imbalance"), 1.0);
  // The note gives each idle figure under its own name, with the value its metric has.
  EXPECT_NE(notes[0]
                .at("pipeline/idle")
                .find(fmt::format("stage 1 idle {:.3f} of the schedule (schedule_idle_fraction), waiting in "
                                  "receives {:.3f} of the "
                                  "step (idle_fraction)",
                                  metrics[0].at("pipeline/schedule_idle_fraction/stage1"),
                                  metrics[0].at("pipeline/idle_fraction/stage1"))),
            std::string::npos)
      << notes[0].at("pipeline/idle");
  EXPECT_NE(notes[0].at("pipeline/idle").find("replayed with these passes"), std::string::npos);
  EXPECT_NE(
      notes[0].at("pipeline/idle").find(fmt::format("stage {} computes the most", busy0 >= busy1 ? 0 : 1)),
      std::string::npos)
      << notes[0].at("pipeline/idle");
  // Rank 1 (the last stage) sends stage 0 the gradients of 4 micro-batches of 16 activations
  // each (16 rows x 16 floats in all) and its 8 inputs of 784 floats; its share of the all-gather
  // and the loss's all-reduce come on top.
  EXPECT_GE(bytes[1], (16u * 16u + 8u * 784u) * 4u);
}

TEST(PipelineMetrics, PassTimesAreReplayedTogetherEverySixtyFourStepsOfEightMicroBatches) {
  const auto cfg = config_of("pipeline", "sgd", pipeline_options(ScheduleKind::GPipe, 2, 8));
  const auto data = make_data(1, 16, torch::kFloat);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 1), testing::build_model(cfg, 1)};
  std::vector<std::map<std::string, double>> metrics(2);
  std::vector<std::vector<std::uint64_t>> bytes(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    for (int s = 0; s < 67; ++s) bytes[r].push_back(strategy->train_step(slice(data, 0, r, 8)).bytes_sent);
    metrics[r] = strategy->metrics();
  });
  // Steps 1 to 64 (the first is not the steady state) each kept 16 pass times, 1,024 in all: the
  // 65th step's call all-gathered them (8 KB from each rank) on top of its usual traffic.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(bytes[r][1], bytes[r][2]);
    EXPECT_GE(bytes[r][64], bytes[r][63] + 1024u * 8u) << "rank " << r;
    EXPECT_EQ(bytes[r][65], bytes[r][63]);
  }
  EXPECT_EQ(metrics[0], metrics[1]);
  for (int s = 0; s < 2; ++s) {
    const double replay_idle = metrics[0].at("pipeline/replay_idle_fraction/stage" + std::to_string(s));
    EXPECT_GT(replay_idle, 0.0);
    EXPECT_LT(replay_idle, 1.0);
  }
  EXPECT_GT(metrics[0].at("pipeline/schedule_over_replay"), 0.0);
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
