// model.deferred_init (Note [Deferred initialisation] in models/Network.h): a deferred network holds
// shapes until materialized, and what it materializes is what an eager build gives, bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>

#include "dtrain/models/ModelFactory.h"

namespace dtrain::models {
namespace {

config::ModelConfig transformer(bool deferred, config::Task task = config::Task::Lm) {
  config::ModelConfig config;
  config.name = "transformer";
  config.task = task;
  config.dim = 16;
  config.depth = 3;
  config.heads = 2;
  config.deferred_init = deferred;
  return config;
}

NetworkPtr built(const config::ModelConfig& config, const InputSpec& input, std::uint64_t seed) {
  torch::manual_seed(seed);
  return create_model(config, input);
}

std::map<std::string, torch::Tensor> parameters_of(const Network& network) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : network.named_parameters()) out[p.key()] = p.value();
  return out;
}

const InputSpec kTokens = InputSpec::tokens(11, 8);

TEST(DeferredInit, HoldsShapesOnlyUntilMaterialized) {
  auto network = built(transformer(true), kTokens, 3);
  ASSERT_TRUE(network->deferred());
  const auto eager = built(transformer(false), kTokens, 3);
  EXPECT_FALSE(eager->deferred());
  EXPECT_EQ(parameter_count(*network), parameter_count(*eager));
  for (const auto& p : network->parameters()) EXPECT_TRUE(p.is_meta());
  for (std::size_t s = 0; s < network->layers()->size(); ++s) EXPECT_TRUE(network->stage_deferred(s));
}

TEST(DeferredInit, MaterializesTheEagerWeightsStageByStage) {
  for (const auto& [config, input] : std::vector<std::pair<config::ModelConfig, InputSpec>>{
           {transformer(true), kTokens},
           {transformer(true, config::Task::Classifier), InputSpec::image(1, 8, 8, 3)},
           {[] {
              auto vit = transformer(true, config::Task::Classifier);
              vit.name = "vit";
              vit.patch = 4;
              return vit;
            }(),
            InputSpec::image(1, 8, 8, 3)}}) {
    SCOPED_TRACE(config.name);
    auto eager_config = config;
    eager_config.deferred_init = false;
    const auto eager = parameters_of(*built(eager_config, input, 5));
    const auto after_eager = torch::rand({4});
    auto network = built(config, input, 5);
    // The generator ends where an eager build leaves it: what is drawn next is the same.
    EXPECT_TRUE(torch::equal(torch::rand({4}), after_eager));
    // Stage 2 only, then the rest; materializing draws nothing from the generator.
    torch::manual_seed(99);
    network->materialize({2});
    EXPECT_FALSE(network->stage_deferred(2));
    EXPECT_TRUE(network->stage_deferred(1));
    const auto after_materialize = torch::rand({4});
    torch::manual_seed(99);
    EXPECT_TRUE(torch::equal(after_materialize, torch::rand({4})));
    network->materialize_all();
    for (const auto& [name, p] : parameters_of(*network)) {
      ASSERT_FALSE(p.is_meta()) << name;
      EXPECT_TRUE(torch::equal(p, eager.at(name))) << name;
    }
  }
}

TEST(DeferredInit, CutsKeepTheirPartOfEachParameter) {
  auto network = built(transformer(true), kTokens, 7);
  const auto eager = parameters_of(*built(transformer(false), kTokens, 7));
  const std::string fc1 = "layers.1.fc1.weight";
  ASSERT_TRUE(eager.count(fc1)) << "the block's first MLP layer is named otherwise";
  // What tensor parallelism does: the parameter held as a shard of the whole, shaped as the cut.
  for (auto& p : network->named_parameters()) {
    if (p.key() == fc1)
      p.value().set_data(torch::empty({p.value().size(0) / 2, p.value().size(1)}, torch::kMeta));
  }
  network->add_cut([&](const std::string& name, const torch::Tensor& whole) {
    return name == fc1 ? whole.chunk(2, 0)[1] : whole;
  });
  network->materialize_all();
  for (const auto& [name, p] : parameters_of(*network)) {
    EXPECT_TRUE(torch::equal(p, name == fc1 ? eager.at(name).chunk(2, 0)[1] : eager.at(name))) << name;
  }
}

TEST(DeferredInit, VisitsEachStageBuiltWhole) {
  auto network = built(transformer(true), kTokens, 9);
  const auto eager = built(transformer(false), kTokens, 9);
  const auto children = network->layers()->named_children();
  std::size_t visited = 0;
  network->for_each_built_stage([&](std::size_t stage, torch::nn::Module& whole) {
    EXPECT_EQ(stage, visited++);
    for (const auto& p : whole.named_parameters()) {
      const auto name = "layers." + children[stage].key() + "." + p.key();
      EXPECT_TRUE(torch::equal(p.value(), parameters_of(*eager).at(name))) << name;
    }
  });
  EXPECT_EQ(visited, network->layers()->size());
  for (const auto& p : network->parameters()) EXPECT_TRUE(p.is_meta());  // nothing kept
}

TEST(DeferredInit, AModelBuiltAtOnceIsRefusedByName) {
  config::ModelConfig config;
  config.name = "mlp";
  config.deferred_init = true;
  try {
    create_model(config, InputSpec::image(1, 28, 28, 10));
    FAIL() << "mlp accepted model.deferred_init";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.deferred_init: model mlp is built at once"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::models
