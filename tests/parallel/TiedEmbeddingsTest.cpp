// gpt's tied embeddings under every strategy that takes them: data_parallel, zero stages 1 to 3 and
// a two-stage pipeline on two ranks end where one process ends (float64, Adam), a pipeline's
// checkpoint holds the tied weight once and continues in one process and back, tensor parallelism
// refuses the tie in one line, and an untied gpt (model.tie_embeddings: false) trains under it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/models/TiedParameters.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using State = std::map<std::string, torch::Tensor>;

constexpr std::int64_t kVocab = 11;
constexpr std::int64_t kSeq = 5;
constexpr int kGlobalBatch = 4;
constexpr int kSteps = 4;

struct Data {
  torch::Tensor inputs;   // (steps, global batch, T)
  torch::Tensor targets;  // (steps, global batch, T)
};

Data make_data() {
  torch::manual_seed(4321);
  return {torch::randint(0, kVocab, {kSteps, kGlobalBatch, kSeq}),
          torch::randint(0, kVocab, {kSteps, kGlobalBatch, kSeq})};
}

config::RunConfig config_of(const std::string& strategy, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(),
                   {"parallel.strategy=" + strategy, "optim.name=adam", "optim.lr=0.01", "model.name=gpt",
                    "model.dim=8", "model.heads=2", "model.depth=2", "model.mlp_ratio=2"});
  return config::parse_run_config("", "<tied embeddings test>", overrides);
}

// Steps [first, last) of `cfg` on `ranks` ranks over gloo (one process without a communicator when
// ranks is 0), every rank's model from its own seed (the strategy broadcasts rank 0's); loads
// `resume` first and saves rank 0's checkpoint into `saved`; returns rank 0's model state. The
// model is cfg.model, or what `build` returns.
using Builder = std::function<models::NetworkPtr()>;
State train(const config::RunConfig& cfg, int ranks, const Data& data, int first, int last,
            const io::Checkpoint* resume = nullptr, io::Checkpoint* saved = nullptr,
            const Builder& build = {}) {
  const int n = std::max(ranks, 1);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(7 + r);
    auto model = build ? build() : models::create_model(cfg.model, models::InputSpec::tokens(kVocab, kSeq));
    model->to(torch::kDouble);
    models.push_back(model);
  }
  std::vector<State> ends(n);
  const auto run = [&](comm::CommunicatorPtr comm) {
    const int r = comm ? comm->rank() : 0;
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    if (resume) strategy->load(*resume);
    const int per_rank = kGlobalBatch / n;
    for (int s = first; s < last; ++s) {
      const auto rows = torch::indexing::Slice(r * per_rank, (r + 1) * per_rank);
      strategy->train_step({data.inputs[s].index({rows}), data.targets[s].index({rows})});
    }
    ends[r] = strategy->model_state();
    io::Checkpoint mine;
    strategy->save(mine);
    if (saved && r == 0) *saved = mine;
  };
  if (ranks == 0) {
    run(nullptr);
  } else {
    dtrain::testing::run_world(ranks, run);
  }
  return ends[0];
}

double max_relative(const State& a, const State& b) {
  return testing::max_relative_difference(a, b);
}

const std::string kTied = "layers.0.tokens.weight";

TEST(TiedEmbeddings, EveryStrategyEndsWhereOneProcessEnds) {
  const auto data = make_data();
  const auto reference = train(config_of("local"), 0, data, 0, kSteps);
  ASSERT_TRUE(reference.count(kTied));
  EXPECT_FALSE(reference.count("layers.3.fc.weight"));
  const std::vector<std::pair<std::string, config::RunConfig>> cases{
      {"data_parallel", config_of("data_parallel")},
      {"zero 1", config_of("zero", {"parallel.zero.stage=1"})},
      {"zero 2", config_of("zero", {"parallel.zero.stage=2"})},
      {"zero 3", config_of("zero", {"parallel.zero.stage=3"})},
      {"pipeline 1f1b",
       config_of("pipeline", {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=2",
                              "parallel.pipeline.balance=cut_points", "parallel.pipeline.cut_points=[2]"})},
      {"pipeline gpipe",
       config_of("pipeline", {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=2",
                              "parallel.pipeline.schedule=gpipe"})},
  };
  for (const auto& [name, cfg] : cases) {
    SCOPED_TRACE(name);
    const auto state = train(cfg, 2, data, 0, kSteps);
    EXPECT_LE(max_relative(state, reference), 1e-6);
    // The weights moved: equality with an untrained model would say nothing.
    EXPECT_GT(
        (state.at(kTied) - train(config_of("local"), 0, data, 0, 0).at(kTied)).abs().max().item<double>(),
        1e-4);
  }
}

TEST(TiedEmbeddings, APipelinesCheckpointHoldsTheTiedWeightOnceAndMovesToOneProcessAndBack) {
  const auto data = make_data();
  const auto local = config_of("local");
  const auto pipeline =
      config_of("pipeline", {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=2"});
  const auto straight = train(local, 0, data, 0, kSteps);

  io::Checkpoint from_pipeline;
  train(pipeline, 2, data, 0, 2, nullptr, &from_pipeline);
  EXPECT_TRUE(from_pipeline.contains("model." + kTied));
  EXPECT_TRUE(from_pipeline.contains("optimizer/" + kTied + "/exp_avg"));
  for (const auto& [key, value] : from_pipeline.tensors())
    EXPECT_EQ(key.find(".fc.weight"), std::string::npos)
        << key << ": the tie is saved once, as the embedding";
  EXPECT_LE(max_relative(train(local, 0, data, 2, kSteps, &from_pipeline), straight), 1e-6);

  io::Checkpoint from_local;
  train(local, 0, data, 0, 2, nullptr, &from_local);
  // The last stage's copy of the tied weight, and its Adam state, load from the embedding's entries.
  EXPECT_LE(max_relative(train(pipeline, 2, data, 2, kSteps, &from_local), straight), 1e-6);
}

// A decoder of one's own, tied as the guide says: the embedding registers the weight, the output
// layer computes with it and says so (models::TiedParameterUser).
class OwnOutputImpl : public torch::nn::Module, public models::TiedParameterUser {
 public:
  explicit OwnOutputImpl(torch::Tensor weight) : weight_(std::move(weight)) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight_); }  // (N, T, V)
  torch::Tensor tied_parameter() const override { return weight_; }
  void use_tied_parameter(torch::Tensor tensor) override { weight_ = std::move(tensor); }

 private:
  torch::Tensor weight_;
};
TORCH_MODULE(OwnOutput);

models::NetworkPtr own_decoder() {
  torch::nn::Embedding embedding(kVocab, 6);
  torch::nn::Sequential layers(embedding, torch::nn::Linear(6, 6), torch::nn::Functional(torch::tanh),
                               OwnOutput(embedding->weight));
  return models::network("own-decoder", layers);
}

TEST(TiedEmbeddings, AModuleOfOnesOwnTiesUnderZeroAndPipeline) {
  const auto data = make_data();
  const auto reference = train(config_of("local"), 0, data, 0, kSteps, nullptr, nullptr, own_decoder);
  EXPECT_EQ(reference.size(), 3u);  // the embedding, the Linear's weight and bias: the tie once
  for (const auto& cfg :
       {config_of("zero", {"parallel.zero.stage=3"}),
        config_of("pipeline",
                  {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=2",
                   "parallel.pipeline.balance=cut_points", "parallel.pipeline.cut_points=[2]"})}) {
    SCOPED_TRACE(cfg.parallel.strategy);
    EXPECT_LE(max_relative(train(cfg, 2, data, 0, kSteps, nullptr, nullptr, own_decoder), reference), 1e-6);
  }
}

std::string refusal(const config::RunConfig& cfg, int ranks) {
  try {
    train(cfg, ranks, make_data(), 0, 1);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(TiedEmbeddings, TensorParallelismAndAShardedPipelineStageRefuseTheTieInOneLine) {
  const auto tp = refusal(config_of("data_parallel", {"parallel.mesh.tp=2"}), 2);
  EXPECT_NE(tp.find("parallel.mesh.tp: model gpt computes its output layer (layers.3)"), std::string::npos)
      << tp;
  EXPECT_NE(tp.find("set model.tie_embeddings: false"), std::string::npos) << tp;
  EXPECT_EQ(tp.find('\n'), std::string::npos) << tp;
  const auto sharded = refusal(
      config_of("pipeline", {"parallel.mesh.pp=2", "parallel.mesh.dp_shard=2", "parallel.pipeline.stages=2"}),
      4);
  EXPECT_EQ(sharded.rfind("parallel.mesh.dp_shard: pipeline stages 0 and 1 share layers.0.tokens.weight", 0),
            0u)
      << sharded;
  EXPECT_NE(sharded.find("set model.tie_embeddings: false"), std::string::npos) << sharded;
  EXPECT_EQ(sharded.find('\n'), std::string::npos) << sharded;
}

// model.tie_embeddings: false, the way out the refusals name: the output layer has its own weight,
// which tensor parallelism splits as any Linear, and the run ends where one process ends.
TEST(TiedEmbeddings, AnUntiedGptTrainsUnderTensorParallelismAsInOneProcess) {
  const auto data = make_data();
  const auto untied = config_of("local", {"model.tie_embeddings=false"});
  EXPECT_FALSE(untied.model.tie_embeddings);
  EXPECT_TRUE(config_of("local").model.tie_embeddings);
  const auto reference = train(untied, 0, data, 0, kSteps);
  ASSERT_TRUE(reference.count("layers.3.fc.weight"));
  const auto tp = train(config_of("data_parallel", {"model.tie_embeddings=false", "parallel.mesh.tp=2"}), 2,
                        data, 0, kSteps);
  EXPECT_LE(max_relative(tp, reference), 1e-6);
  EXPECT_GT((tp.at("layers.3.fc.weight") - train(untied, 0, data, 0, 0).at("layers.3.fc.weight"))
                .abs()
                .max()
                .item<double>(),
            1e-4);
}

}  // namespace
}  // namespace dtrain::parallel
