// Tensor parallelism (parallel.mesh.tp): a small transformer language model and vit in float64, their
// layers split over tp ranks as threads over gloo, composed with data_parallel, zero (2-D and HSDP)
// and pipeline (3-D), each ending where one process on the union batch ends; checkpoints whole and
// movable between meshes; the bytes of a step's tp group as Megatron-LM's formula says; and every
// refusal in one line.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Linear.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/models/Recompute.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/TensorOps.h"
#include "dtrain/parallel/TensorParallel.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using State = std::map<std::string, torch::Tensor>;
using testing::max_abs_difference;

constexpr std::int64_t kVocab = 8;
constexpr std::int64_t kSeq = 4;
constexpr int kGlobalBatch = 8;

struct Data {
  torch::Tensor inputs;   // (steps, global batch, ...)
  torch::Tensor targets;  // (steps, global batch[, T])
};

bool is_lm(const config::RunConfig& cfg) {
  return cfg.model.name == "transformer";
}

models::InputSpec input_of(const config::RunConfig& cfg) {
  return is_lm(cfg) ? models::InputSpec::tokens(kVocab, kSeq) : models::InputSpec::image(1, 8, 8, 4);
}

Data data_of(const config::RunConfig& cfg, int steps) {
  torch::manual_seed(4321);
  if (is_lm(cfg)) {
    return {torch::randint(0, kVocab, {steps, kGlobalBatch, kSeq}),
            torch::randint(0, kVocab, {steps, kGlobalBatch, kSeq})};
  }
  return {torch::randn({steps, kGlobalBatch, 1, 8, 8}, torch::kDouble),
          torch::randint(0, 4, {steps, kGlobalBatch})};
}

config::RunConfig config_of(const std::string& model, const std::string& strategy,
                            std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(),
                   {"parallel.strategy=" + strategy, "optim.name=adam", "optim.lr=0.01", "model.dim=16",
                    "model.heads=4", "model.depth=2", "model.mlp_ratio=2"});
  if (model == "lm") {
    overrides.insert(overrides.end(), {"model.name=transformer", "model.task=lm"});
  } else {
    overrides.insert(overrides.end(), {"model.name=vit", "model.patch=4"});
  }
  return config::parse_run_config("", "<tensor parallel test>", overrides);
}

data::Batch slice(const Data& data, int step, int rank, int ranks) {
  const int per_rank = kGlobalBatch / ranks;
  const auto rows = torch::indexing::Slice(rank * per_rank, (rank + 1) * per_rank);
  return {data.inputs[step].index({rows}), data.targets[step].index({rows})};
}

// Steps [first, last) of `cfg` on `ranks` ranks over gloo (one process without a communicator
// when ranks is 0), each rank's model from seed 7 + rank; loads `resume` first, saves into `saved`
// (rank 0's); returns rank 0's model state, after checking every rank's agrees.
State train(const config::RunConfig& cfg, int ranks, const Data& data, int first, int last,
            const io::Checkpoint* resume = nullptr, io::Checkpoint* saved = nullptr,
            std::vector<comm::CommStats>* traffic = nullptr) {
  const int n = std::max(ranks, 1);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < n; ++r) {
    // Other seeds per rank show that the strategy starts every rank from the same weights; a
    // deferred model is built from the one seed on every rank instead (it is never broadcast).
    torch::manual_seed(cfg.model.deferred_init ? 7 : 7 + r);
    auto model = models::create_model(cfg.model, input_of(cfg));
    model->to(torch::kDouble);
    models::apply_activation_checkpointing(*model, cfg.train.activation_checkpointing,
                                           cfg.train.activation_checkpointing_every);
    models.push_back(model);
  }
  std::vector<State> ends(n);
  if (traffic) traffic->assign(n, {});
  const auto run = [&](comm::CommunicatorPtr comm) {
    const int r = comm ? comm->rank() : 0;
    StrategyContext context{models[r], optim::optimizer_factory(cfg.optim),
                            optim::create_loss(cfg.optim.loss), comm, cfg.parallel};
    context.loss_name = cfg.optim.loss;
    auto strategy = create_strategy(std::move(context));
    if (resume) strategy->load(*resume);
    for (int s = first; s < last; ++s) {
      const auto batch = slice(data, s, r, n);
      const auto result = strategy->train_step(batch);
      EXPECT_EQ(result.samples, batch.size());
      if (result.outputs.defined()) {
        EXPECT_EQ(result.outputs.size(0), batch.size());
        if (is_lm(cfg)) EXPECT_EQ(result.outputs.size(-1), kVocab);
      }
    }
    if (traffic) (*traffic)[r] = strategy->comm_stats();
    ends[r] = strategy->model_state();
    if (saved) {
      io::Checkpoint mine;
      strategy->save(mine);
      if (r == 0) *saved = mine;
    }
  };
  if (ranks == 0) {
    run(nullptr);
  } else {
    dtrain::testing::run_world(ranks, run);
  }
  for (int r = 1; r < n; ++r) {
    for (const auto& [name, value] : ends[0]) {
      if (ends[r].count(name))
        EXPECT_TRUE(torch::equal(ends[r].at(name), value)) << "rank " << r << " " << name;
    }
  }
  return ends[0];
}

constexpr int kSteps = 20;

State one_process(const std::string& model, int steps = kSteps) {
  const auto cfg = config_of(model, "local");
  return train(cfg, 0, data_of(cfg, steps), 0, steps);
}

struct MeshCase {
  std::string name;
  std::string model;
  std::string strategy;
  int ranks;
  std::vector<std::string> overrides;
};

void PrintTo(const MeshCase& c, std::ostream* out) {
  *out << c.name;
}

class MeshEquivalence : public ::testing::TestWithParam<MeshCase> {};

// Every arrangement ends where one process on the union batch ends (float64, Adam).
TEST_P(MeshEquivalence, EndsWhereOneProcessEnds) {
  const auto& c = GetParam();
  const auto cfg = config_of(c.model, c.strategy, c.overrides);
  const auto end = train(cfg, c.ranks, data_of(cfg, kSteps), 0, kSteps);
  const auto expected = one_process(c.model);
  ASSERT_EQ(end.size(), expected.size());
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(end.count(name)) << name;
    ASSERT_EQ(end.at(name).sizes(), value.sizes()) << name;
  }
  EXPECT_LE(max_abs_difference(end, expected), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, MeshEquivalence,
    ::testing::Values(
        MeshCase{"LmTp2", "lm", "data_parallel", 2, {"parallel.mesh.tp=2"}},
        MeshCase{"LmTp2SequenceParallel",
                 "lm",
                 "data_parallel",
                 2,
                 {"parallel.mesh.tp=2", "parallel.tensor.sequence_parallel=true"}},
        MeshCase{"VitTp2", "vit", "data_parallel", 2, {"parallel.mesh.tp=2"}},
        MeshCase{"LmTp2Replicas2", "lm", "data_parallel", 4, {"parallel.mesh.tp=2"}},
        // PowerSGD on the data axis at full rank (min(rows, cols)) reconstructs every gradient matrix.
        MeshCase{
            "LmTp2Replicas2PowerSgdFullRank",
            "lm",
            "data_parallel",
            4,
            {"parallel.mesh.tp=2", "parallel.data_parallel.compression=powersgd",
             "parallel.data_parallel.powersgd_rank=64", "parallel.data_parallel.powersgd_min_compression=0",
             "parallel.data_parallel.powersgd_start_step=0"}},
        MeshCase{"LmTp2Shard2", "lm", "zero", 4, {"parallel.mesh.tp=2", "parallel.zero.stage=3"}},
        MeshCase{"LmHsdp2x2Tp2",
                 "lm",
                 "zero",
                 8,
                 {"parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2", "parallel.mesh.tp=2",
                  "parallel.zero.stage=3"}},
        MeshCase{"Lm3dGpipe",
                 "lm",
                 "pipeline",
                 8,
                 {"parallel.mesh.pp=2", "parallel.mesh.dp_replicate=2", "parallel.mesh.tp=2",
                  "parallel.pipeline.schedule=gpipe", "parallel.pipeline.micro_batches=2"}},
        MeshCase{"Lm3d1f1bSequenceParallel",
                 "lm",
                 "pipeline",
                 8,
                 {"parallel.mesh.pp=2", "parallel.mesh.dp_replicate=2", "parallel.mesh.tp=2",
                  "parallel.pipeline.schedule=1f1b", "parallel.pipeline.micro_batches=2",
                  "parallel.tensor.sequence_parallel=true"}},
        MeshCase{"VitTp2Pp2", "vit", "pipeline", 4, {"parallel.mesh.pp=2", "parallel.mesh.tp=2"}},
        MeshCase{"LmPp2Shard2", "lm", "pipeline", 4, {"parallel.mesh.pp=2", "parallel.mesh.dp_shard=2"}},
        MeshCase{"LmPp2Replicate2Shard2",
                 "lm",
                 "pipeline",
                 8,
                 {"parallel.mesh.pp=2", "parallel.mesh.dp_replicate=2", "parallel.mesh.dp_shard=2",
                  "parallel.pipeline.schedule=1f1b", "parallel.pipeline.micro_batches=2"}},
        MeshCase{"Lm3dShardTp",
                 "lm",
                 "pipeline",
                 8,
                 {"parallel.mesh.pp=2", "parallel.mesh.dp_shard=2", "parallel.mesh.tp=2",
                  "parallel.pipeline.schedule=gpipe", "parallel.pipeline.micro_batches=2"}},
        // Each rank builds only its stage's layers and its tp shards of them.
        MeshCase{"Lm3dShardTpDeferred",
                 "lm",
                 "pipeline",
                 8,
                 {"parallel.mesh.pp=2", "parallel.mesh.dp_shard=2", "parallel.mesh.tp=2",
                  "parallel.pipeline.schedule=1f1b", "parallel.pipeline.micro_batches=2",
                  "model.deferred_init=true"}},
        MeshCase{"LmTp2Shard2Deferred",
                 "lm",
                 "zero",
                 4,
                 {"parallel.mesh.tp=2", "parallel.zero.stage=3", "model.deferred_init=true"}},
        MeshCase{"LmTp2Recomputed",
                 "lm",
                 "data_parallel",
                 2,
                 {"parallel.mesh.tp=2", "parallel.tensor.sequence_parallel=true",
                  "train.activation_checkpointing=full"}}),
    [](const ::testing::TestParamInfo<MeshCase>& info) { return info.param.name; });

TEST(TensorParallel, ShardsOfFusedProjectionsGoBackWhole) {
  const auto whole = torch::arange(24, torch::kDouble).reshape({12, 2});
  const tensor::ShardSpec fused{0, 3};
  std::vector<torch::Tensor> shards;
  for (int r = 0; r < 2; ++r) shards.push_back(tensor::shard_of(whole, fused, r, 2));
  // Rank 0 holds rows 0-1 of each of the three parts (q, k, v): rows 0, 1, 4, 5, 8, 9.
  EXPECT_TRUE(
      torch::equal(shards[0].select(1, 0), torch::tensor({0., 2., 8., 10., 16., 18.}, torch::kDouble)));
  EXPECT_TRUE(torch::equal(tensor::whole_of(shards, fused), whole));
  const tensor::ShardSpec columns{1, 1};
  EXPECT_TRUE(torch::equal(
      tensor::whole_of({tensor::shard_of(whole, columns, 0, 2), tensor::shard_of(whole, columns, 1, 2)},
                       columns),
      whole));
}

// A checkpoint saved by `meshed` on `ranks` ranks halfway holds the whole tensors one process's
// holds, with their values: one process resumes from it and ends where the uninterrupted run ends,
// and `meshed` resumes from one process's. Returns the meshed checkpoint.
io::Checkpoint expect_checkpoints_move(const config::RunConfig& meshed, int ranks) {
  const auto local = config_of("lm", "local");
  const auto data = data_of(meshed, kSteps);
  const int half = kSteps / 2;
  io::Checkpoint from_meshed, from_local;
  train(meshed, ranks, data, 0, half, nullptr, &from_meshed);
  train(local, 0, data, 0, half, nullptr, &from_local);
  for (const auto& [key, value] : from_local.tensors()) {
    EXPECT_TRUE(from_meshed.contains(key)) << key;
    if (!from_meshed.contains(key)) continue;
    EXPECT_EQ(from_meshed.tensor(key).sizes(), value.sizes()) << key;
    EXPECT_LE(
        (from_meshed.tensor(key).to(torch::kDouble) - value.to(torch::kDouble)).abs().max().item<double>(),
        1e-9)
        << key;
  }
  const auto uninterrupted = one_process("lm");
  EXPECT_LE(max_abs_difference(train(local, 0, data, half, kSteps, &from_meshed), uninterrupted), 1e-6);
  EXPECT_LE(max_abs_difference(train(meshed, ranks, data, half, kSteps, &from_local), uninterrupted), 1e-6);
  return from_meshed;
}

// Under tp 2 x dp_shard 2, and from there into HSDP x tp.
TEST(TensorParallel, CheckpointsMoveBetweenMeshesAndOneProcess) {
  const auto from_tp =
      expect_checkpoints_move(config_of("lm", "zero", {"parallel.mesh.tp=2", "parallel.zero.stage=3"}), 4);
  const auto hsdp_tp = config_of(
      "lm", "zero", {"parallel.mesh.dp_replicate=2", "parallel.mesh.tp=2", "parallel.zero.stage=2"});
  const auto data = data_of(hsdp_tp, kSteps);
  EXPECT_LE(max_abs_difference(train(hsdp_tp, 4, data, kSteps / 2, kSteps, &from_tp), one_process("lm")),
            1e-6);
}

// A pipeline whose stages shard their optimizer state over dp_shard saves it whole by name.
TEST(TensorParallel, ShardedPipelineCheckpointsMoveToOneProcessAndBack) {
  expect_checkpoints_move(config_of("lm", "pipeline", {"parallel.mesh.pp=2", "parallel.mesh.dp_shard=2"}), 4);
}

// Megatron-LM's count: per block, two all-reduces of the (b, s, h) activations forward and two
// backward; the vocabulary-parallel embedding one more forward, and the output layer's input one
// backward; plus the union of the group's batches. Counted on the tp group, which here is the world.
TEST(TensorParallel, TpGroupCarriesMegatronsAllReducesPerBlock) {
  const auto cfg = config_of("lm", "data_parallel", {"parallel.mesh.tp=2"});
  std::vector<comm::CommStats> traffic;
  train(cfg, 2, data_of(cfg, 1), 0, 1, nullptr, nullptr, &traffic);
  const auto& allreduce = traffic[0].ops.at("allreduce");
  // (b, s, h) = (union of 8 rows, 4, 16) doubles.
  const std::uint64_t activation = 8ULL * kSeq * 16 * sizeof(double);
  const std::uint64_t blocks = 2;
  // Loss: the row maxima and (sum, target logit) per position.
  const std::uint64_t loss = 8ULL * kSeq * sizeof(double) * 3;
  EXPECT_EQ(allreduce.bytes, (4 * blocks + 2) * activation + loss);
  EXPECT_EQ(allreduce.calls, 4 * blocks + 2 + 2);
}

TEST(TensorParallelRefusals, EachInOneLineNamingWhatIsWrong) {
  const auto refused = [](const config::RunConfig& cfg, int ranks, const std::string& expected) {
    SCOPED_TRACE(expected);
    std::string message;
    try {
      train(cfg, ranks, data_of(cfg, 1), 0, 1);
    } catch (const std::exception& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  refused(
      config_of("lm", "data_parallel", {"parallel.mesh.tp=2", "parallel.tensor.plan=[layers.*.fc9=colwise]"}),
      2, "parallel.tensor.plan: \"layers.*.fc9=colwise\" names no module");
  refused(config_of("lm", "data_parallel",
                    {"parallel.mesh.tp=2", "parallel.tensor.plan=[layers.1.norm1=colwise]"}),
          2, "which is not a Linear layer");
  refused(config_of("lm", "data_parallel",
                    {"parallel.mesh.tp=2", "parallel.tensor.plan=[layers.1.fc1=diagonal]"}),
          2, "unknown style \"diagonal\"");
  refused(config_of("lm", "data_parallel",
                    {"parallel.mesh.tp=2", "parallel.tensor.plan=[layers.1.norm1=sequence]"}),
          2, "sequence_parallel is false");
  refused(config_of("lm", "data_parallel", {"parallel.mesh.tp=4", "model.heads=2"}), 4, "model.heads: 2");
  refused(config_of("lm", "data_parallel", {"parallel.mesh.tp=2", "optim.loss=mse"}), 2, "optim.loss is mse");
  refused(config_of("lm", "data_parallel", {"parallel.mesh.tp=2", "optim.name=lbfgs"}), 2,
          "optim.name: lbfgs");
  refused(config_of("lm", "local", {"parallel.mesh.tp=2"}), 2,
          "parallel.mesh.tp: 2, but parallel.strategy local");
  refused(config_of("lm", "dad", {"parallel.mesh.tp=2"}), 2,
          "parallel.mesh.tp: 2, but parallel.strategy dad");
  refused(config_of("lm", "data_parallel", {"parallel.mesh.tp=3"}), 2, "parallel.mesh.tp: 3 does not divide");
  refused(config_of("lm", "data_parallel", {"parallel.tensor.sequence_parallel=true"}), 2,
          "parallel.tensor.sequence_parallel: set, but parallel.mesh.tp is 1");
}

// A model of one's own: a plan by module name, and a plain torch::nn::Linear refused with the way out.
struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl() {
    up = register_module("up", models::Linear(6, 8));
    down = register_module("down", models::Linear(8, 3));
    plain = register_module("plain", torch::nn::Linear(3, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return plain(down(torch::relu(up(x)))); }
  models::Linear up{nullptr}, down{nullptr};
  torch::nn::Linear plain{nullptr};
};
TORCH_MODULE(TwoLayers);

TEST(TensorParallel, UserModuleByPlanEqualsOneProcess) {
  torch::manual_seed(3);
  const auto inputs = torch::randn({4, 2, 6}, torch::kDouble);
  const auto targets = torch::randint(0, 3, {4, 2});
  const auto run = [&](const std::vector<std::string>& plan, int ranks) {
    State end;
    // Built here: torch's default generator is shared between the ranks' threads.
    std::vector<models::NetworkPtr> models;
    for (int r = 0; r < std::max(ranks, 1); ++r) {
      torch::manual_seed(11);
      auto module = TwoLayers();
      module->to(torch::kDouble);
      models.push_back(models::network("two-layers", module.ptr()));
    }
    const auto body = [&](comm::CommunicatorPtr comm) {
      auto model = models[comm ? comm->rank() : 0];
      auto cfg = config::parse_run_config("", "<test>", {"optim.name=sgd", "optim.lr=0.1"});
      cfg.parallel.strategy = comm ? "data_parallel" : "local";
      if (comm) {
        cfg.parallel.mesh.tp = ranks;
        cfg.parallel.tensor.plan = plan;
      }
      StrategyContext context{model, optim::optimizer_factory(cfg.optim), optim::create_loss(cfg.optim.loss),
                              comm, cfg.parallel};
      context.loss_name = cfg.optim.loss;
      auto strategy = create_strategy(std::move(context));
      for (int s = 0; s < 4; ++s) {
        const int r = comm ? comm->rank() : 0;
        const int n = comm ? ranks : 1;
        const auto rows = torch::indexing::Slice(r * 2 / n, (r + 1) * 2 / n);
        strategy->train_step({inputs[s].index({rows}), targets[s].index({rows})});
      }
      const auto state = strategy->model_state();
      if (!comm || comm->rank() == 0) end = state;
    };
    if (ranks == 0) {
      body(nullptr);
    } else {
      dtrain::testing::run_world(ranks, body);
    }
    return end;
  };
  const auto expected = run({}, 0);
  EXPECT_LE(max_abs_difference(run({"layers.0.up=colwise", "layers.0.down=rowwise"}, 2), expected), 1e-9);
  try {
    run({"layers.0.plain=colwise"}, 2);
    ADD_FAILURE() << "a plain torch::nn::Linear was split";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("build it as dtrain::models::Linear"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::parallel
