// gpt: a causal decoder whose output layer computes with the token embedding's weight. The tied
// weight is one parameter over one storage, and its gradient is the sum of what the embedding and
// the output layer contribute: an untied gpt with the same weights, its two gradients added.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <stdexcept>
#include <string>

#include "dtrain/models/Architectures.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/models/TiedParameters.h"

namespace dtrain::models {
namespace {

constexpr std::int64_t kVocab = 13;
constexpr std::int64_t kSeq = 6;

config::ModelConfig gpt_config() {
  config::ModelConfig config;
  config.name = "gpt";
  config.dim = 16;
  config.depth = 2;
  config.heads = 2;
  config.mlp_ratio = 2.0;
  return config;
}

const InputSpec kTokens = InputSpec::tokens(kVocab, kSeq);

TEST(Gpt, TheTiedWeightIsOneParameterOverOneStorage) {
  torch::manual_seed(0);
  auto tied = create_model(gpt_config(), kTokens);
  EXPECT_EQ(tied->kind(), "gpt");
  const auto named = tied->named_parameters();
  ASSERT_TRUE(named.contains("layers.0.tokens.weight"));
  const auto embedding = named["layers.0.tokens.weight"];
  const auto users = tied_parameter_users(*tied);
  ASSERT_EQ(users.size(), 1u);
  EXPECT_EQ(users.front().first, "layers.3");  // the output layer after two blocks
  EXPECT_TRUE(users.front().second->tied_parameter().is_same(embedding));
  EXPECT_TRUE(users.front().second->tied_parameter().storage().is_alias_of(embedding.storage()));
  // Listed once: no parameter of the model is another's tensor, and the head registers none of its own
  // beyond its norm.
  for (const auto& item : named) {
    if (item.key() != "layers.0.tokens.weight") {
      EXPECT_FALSE(item.value().is_same(embedding)) << item.key();
    }
  }
  EXPECT_FALSE(named.contains("layers.3.fc.weight"));

  torch::manual_seed(0);
  auto untied = detail::build_gpt(gpt_config(), kTokens, /*tied=*/false);
  EXPECT_TRUE(tied_parameter_users(*untied).empty());
  EXPECT_EQ(parameter_count(*untied) - parameter_count(*tied), kVocab * 16);
  EXPECT_NE(summary(*tied, kTokens).find("next-token logits over 13 tokens"), std::string::npos);
}

TEST(Gpt, TheTiedGradientIsTheSumOfTheEmbeddingsAndTheOutputLayers) {
  torch::manual_seed(1);
  auto tied = create_model(gpt_config(), kTokens);
  tied->to(torch::kDouble);
  auto untied = detail::build_gpt(gpt_config(), kTokens, /*tied=*/false);
  untied->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    auto target = untied->named_parameters();
    for (const auto& item : tied->named_parameters()) target[item.key()].copy_(item.value());
    target["layers.3.fc.weight"].copy_(tied->named_parameters()["layers.0.tokens.weight"]);
  }
  torch::manual_seed(2);
  const auto tokens = torch::randint(0, kVocab, {3, kSeq});
  const auto next = torch::randint(0, kVocab, {3, kSeq});
  const auto loss = [&](Network& model) {
    return torch::nn::functional::cross_entropy(model.forward(tokens).reshape({-1, kVocab}),
                                                next.reshape({-1}));
  };
  const auto tied_loss = loss(*tied);
  const auto untied_loss = loss(*untied);
  EXPECT_NEAR(tied_loss.item<double>(), untied_loss.item<double>(), 1e-12);
  tied_loss.backward();
  untied_loss.backward();
  const auto tied_params = tied->named_parameters();
  const auto untied_params = untied->named_parameters();
  const auto sum =
      untied_params["layers.0.tokens.weight"].grad() + untied_params["layers.3.fc.weight"].grad();
  const auto& grad = tied_params["layers.0.tokens.weight"].grad();
  // Both uses contribute: neither alone is the tied gradient.
  EXPECT_GT((grad - untied_params["layers.3.fc.weight"].grad()).abs().max().item<double>(), 1e-6);
  EXPECT_LE((grad - sum).abs().max().item<double>(), 1e-12 * std::max(1.0, sum.abs().max().item<double>()));
  for (const auto& item : tied_params) {
    if (item.key() == "layers.0.tokens.weight") continue;
    EXPECT_TRUE(torch::allclose(item.value().grad(), untied_params[item.key()].grad(), 1e-10, 1e-12))
        << item.key();
  }
}

TEST(Gpt, EachPositionSeesOnlyItselfAndEarlierOnes) {
  torch::manual_seed(3);
  auto model = create_model(gpt_config(), kTokens);
  model->eval();
  const auto tokens = torch::randint(0, kVocab, {2, kSeq});
  auto changed = tokens.clone();
  changed.select(1, kSeq - 1).fill_(0);
  changed.select(1, kSeq - 1).add_((tokens.select(1, kSeq - 1) + 1) % kVocab);
  const auto a = model->forward(tokens);
  const auto b = model->forward(changed);
  EXPECT_EQ(a.sizes(), torch::IntArrayRef({2, kSeq, kVocab}));
  EXPECT_TRUE(torch::allclose(a.narrow(1, 0, kSeq - 1), b.narrow(1, 0, kSeq - 1), 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(a.select(1, kSeq - 1), b.select(1, kSeq - 1), 1e-6, 1e-6));
}

TEST(Gpt, TieEmbeddingsFalseBuildsAnOutputLayerOfItsOwn) {
  auto config = gpt_config();
  config.tie_embeddings = false;
  torch::manual_seed(0);
  auto untied = create_model(config, kTokens);
  EXPECT_TRUE(tied_parameter_users(*untied).empty());
  const auto named = untied->named_parameters();
  ASSERT_TRUE(named.contains("layers.3.fc.weight"));
  EXPECT_FALSE(named["layers.3.fc.weight"].is_same(named["layers.0.tokens.weight"]));
  EXPECT_EQ(parameter_count(*untied) - parameter_count(*create_model(gpt_config(), kTokens)), kVocab * 16);
}

TEST(Gpt, TieEmbeddingsFalseIsRefusedByEveryOtherModelInOneLine) {
  for (const std::string name : {"transformer", "albert", "mlp"}) {
    SCOPED_TRACE(name);
    auto config = gpt_config();
    config.name = name;
    config.size = config::ModelSize::Tiny;
    config.tie_embeddings = false;
    try {
      create_model(config, name == "mlp" ? InputSpec::image(1, 4, 4, 3) : InputSpec::tokens(kVocab, kSeq, 2));
      FAIL() << "expected a refusal";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("model.tie_embeddings: model " + name + " has no output layer tied", 0), 0u)
          << what;
      EXPECT_NE(what.find("remove model.tie_embeddings"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

TEST(Gpt, ImagesAreRefusedNamingTheDataSet) {
  try {
    create_model(gpt_config(), InputSpec::image(1, 28, 28, 10));
    FAIL() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpt: expected token inputs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::models
