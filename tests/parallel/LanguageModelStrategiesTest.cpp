// The language models under every strategy. ALBERT (its one shared layer, padded sentences) under
// data_parallel, zero stages 1 to 3, a pipeline cut between the body and its head (gpipe and 1f1b)
// and dAD ends where one process ends (float64, AdamW, two ranks); gpt's tied embeddings under dAD
// too. The strategies that change the mathematics (rank-dAD, PowerSGD, fp16 compression,
// decentralized DSGD) learn a task on each model: the loss falls, and ALBERT's shared layer stays
// one parameter set.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using State = std::map<std::string, torch::Tensor>;

constexpr std::int64_t kVocab = 20;
constexpr std::int64_t kSeq = 6;
constexpr int kGlobalBatch = 8;

struct Data {
  torch::Tensor inputs;   // (steps, global batch, T)
  torch::Tensor targets;  // (steps, global batch) for albert, (steps, global batch, T) for gpt
};

// Sentences of ids 1..19 with a tail of padding (id 0) on every other row; the label says whether
// the first token is below 10, which ALBERT learns in a few steps.
Data albert_data(int steps) {
  torch::manual_seed(2024);
  auto inputs = torch::randint(1, kVocab, {steps, kGlobalBatch, kSeq});
  using torch::indexing::Slice;
  inputs.index_put_({Slice(), Slice(0, kGlobalBatch, 2), Slice(kSeq - 2, torch::indexing::None)}, 0);
  const auto targets = inputs.index({Slice(), Slice(), 0}).lt(10).to(torch::kLong);
  return {inputs, targets};
}

// Sequences that count up by one (mod the vocabulary) from a random start: the next token is
// the current one plus one, which gpt learns.
Data gpt_data(int steps) {
  torch::manual_seed(2025);
  const auto start = torch::randint(0, kVocab, {steps, kGlobalBatch, 1});
  const auto inputs = (start + torch::arange(kSeq)).remainder(kVocab);
  return {inputs, (inputs + 1).remainder(kVocab)};
}

config::RunConfig albert_config(const std::string& strategy, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(),
                   {"parallel.strategy=" + strategy, "optim.name=adamw", "optim.lr=0.01", "model.name=albert",
                    "model.size=tiny", "model.albert={num_layers: 3, classifier_dropout: 0}"});
  return config::parse_run_config("", "<language model strategies test>", overrides);
}

config::RunConfig gpt_config(const std::string& strategy, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(),
                   {"parallel.strategy=" + strategy, "optim.name=adam", "optim.lr=0.01", "model.name=gpt",
                    "model.dim=16", "model.heads=2", "model.depth=2", "model.mlp_ratio=2"});
  return config::parse_run_config("", "<language model strategies test>", overrides);
}

models::InputSpec spec_of(const config::RunConfig& cfg) {
  if (cfg.model.name == "gpt") return models::InputSpec::tokens(kVocab, kSeq);
  auto spec = models::InputSpec::tokens(kVocab, kSeq, 2);
  spec.pad_id = 0;
  return spec;
}

struct Run {
  State state;                 // rank 0's model state at the end
  std::vector<double> losses;  // rank 0's step losses
};

// `steps` steps of `cfg` on `ranks` ranks over threads (one process without a communicator when
// ranks is 0), each rank's model from its own seed (a strategy that starts together broadcasts
// rank 0's), in `dtype`.
Run train(const config::RunConfig& cfg, int ranks, const Data& data, int steps, torch::Dtype dtype) {
  const int n = std::max(ranks, 1);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(11 + (cfg.parallel.strategy == "decentralized" ? 0 : r));
    auto model = models::create_model(cfg.model, spec_of(cfg));
    model->to(dtype);
    models.push_back(model);
  }
  std::vector<Run> runs(n);
  const auto run = [&](comm::CommunicatorPtr comm) {
    const int r = comm ? comm->rank() : 0;
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    const int per_rank = kGlobalBatch / n;
    for (int s = 0; s < steps; ++s) {
      const auto rows = torch::indexing::Slice(r * per_rank, (r + 1) * per_rank);
      const auto result = strategy->train_step({data.inputs[s].index({rows}), data.targets[s].index({rows})});
      runs[r].losses.push_back(result.loss.value());
    }
    runs[r].state = strategy->model_state();
  };
  if (ranks == 0) {
    run(nullptr);
  } else {
    dtrain::testing::run_world(ranks, run);
  }
  return runs[0];
}

// Relative to each tensor's largest magnitude, at least 1e-6: the attention key's bias has a zero
// gradient in exact arithmetic (softmax ignores a constant added to every key's score), so it holds
// only the rounding of a sum, which the order of a reduction changes, around 1e-16.
double max_relative(const State& a, const State& b) {
  return testing::max_relative_difference(a, b, 1e-6);
}

double mean(const std::vector<double>& v, std::size_t first, std::size_t last) {
  double sum = 0.0;
  for (auto i = first; i < last; ++i) sum += v[i];
  return sum / static_cast<double>(last - first);
}

// ALBERT's one shared layer: its parameters appear once, under encoder.albert_layer.
int shared_layer_tensors(const State& state) {
  int n = 0;
  for (const auto& [name, t] : state) n += name.rfind("layers.0.encoder.albert_layer.", 0) == 0 ? 1 : 0;
  return n;
}

TEST(LanguageModelStrategies, AlbertUnderEveryExactStrategyEndsWhereOneProcessEnds) {
  constexpr int kSteps = 4;
  const auto data = albert_data(kSteps);
  const auto reference = train(albert_config("local"), 0, data, kSteps, torch::kDouble).state;
  const auto start = train(albert_config("local"), 0, data, 0, torch::kDouble).state;
  const int shared = shared_layer_tensors(reference);
  EXPECT_GT(shared, 0);
  const std::vector<std::pair<std::string, config::RunConfig>> cases{
      {"data_parallel", albert_config("data_parallel")},
      {"zero 1", albert_config("zero", {"parallel.zero.stage=1"})},
      {"zero 2", albert_config("zero", {"parallel.zero.stage=2"})},
      {"zero 3", albert_config("zero", {"parallel.zero.stage=3"})},
      {"pipeline 1f1b",
       albert_config("pipeline",
                     {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=2",
                      "parallel.pipeline.balance=cut_points", "parallel.pipeline.cut_points=[1]"})},
      {"pipeline gpipe",
       albert_config("pipeline", {"parallel.pipeline.stages=2", "parallel.pipeline.micro_batches=2",
                                  "parallel.pipeline.balance=cut_points", "parallel.pipeline.cut_points=[1]",
                                  "parallel.pipeline.schedule=gpipe"})},
      {"dad", albert_config("dad")},
  };
  for (const auto& [name, cfg] : cases) {
    SCOPED_TRACE(name);
    const auto state = train(cfg, 2, data, kSteps, torch::kDouble).state;
    EXPECT_LE(max_relative(state, reference), 1e-6);
    EXPECT_EQ(shared_layer_tensors(state), shared);
    const auto& query = state.at("layers.0.encoder.albert_layer.attention.query.weight");
    EXPECT_GT(
        (query - start.at("layers.0.encoder.albert_layer.attention.query.weight")).abs().max().item<double>(),
        1e-4);
  }
}

TEST(LanguageModelStrategies, GptsTiedEmbeddingUnderDadEndsWhereOneProcessEnds) {
  constexpr int kSteps = 4;
  const auto data = gpt_data(kSteps);
  const auto reference = train(gpt_config("local"), 0, data, kSteps, torch::kDouble).state;
  ASSERT_TRUE(reference.count("layers.0.tokens.weight"));
  const auto state = train(gpt_config("dad"), 2, data, kSteps, torch::kDouble).state;
  EXPECT_LE(max_relative(state, reference), 1e-6);
}

// The strategies that change the mathematics, on both models: the loss of the last five steps is
// well under the first five's.
TEST(LanguageModelStrategies, StrategiesThatChangeTheMathematicsLearnBothModels) {
  constexpr int kSteps = 30;
  const std::vector<std::pair<std::string, std::vector<std::string>>> strategies{
      {"rankdad", {"parallel.dad.rank=2"}},
      {"data_parallel",
       {"parallel.data_parallel.compression=powersgd", "parallel.data_parallel.powersgd_start_step=2"}},
      {"data_parallel", {"parallel.data_parallel.compression=fp16"}},
      {"decentralized", {"parallel.graph.type=complete"}},
  };
  for (const auto& model : {std::string("albert"), std::string("gpt")}) {
    const auto data = model == "albert" ? albert_data(kSteps) : gpt_data(kSteps);
    for (const auto& [strategy, overrides] : strategies) {
      SCOPED_TRACE(model + " " + strategy + " " + overrides.front());
      const auto cfg =
          model == "albert" ? albert_config(strategy, overrides) : gpt_config(strategy, overrides);
      const auto run = train(cfg, 2, data, kSteps, torch::kFloat);
      const double first = mean(run.losses, 0, 5), last = mean(run.losses, kSteps - 5, kSteps);
      // Measured: albert 0.65 -> under 0.02 with each; gpt 2.95 -> 1.2-1.3, and 1.95 under PowerSGD
      // at rank 1.
      EXPECT_LT(last, 0.75 * first) << "first steps " << first << ", last steps " << last;
      if (model == "albert")
        EXPECT_EQ(shared_layer_tensors(run.state),
                  shared_layer_tensors(train(albert_config("local"), 0, data, 0, torch::kFloat).state));
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
