// albert: the paper's parameter counts, every parameter named after Hugging Face's, one layer whose
// gradient is the sum of what each application contributes (against unshared copies), padding that
// changes nothing, and the sizes refused by setting.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <stdexcept>
#include <string>

#include "dtrain/models/Albert.h"
#include "dtrain/models/ModelFactory.h"

namespace dtrain::models {
namespace {

config::ModelConfig albert(config::ModelSize size) {
  config::ModelConfig config;
  config.name = "albert";
  config.size = size;
  return config;
}

// Sequences of `t` tokens over 50 ids padded with `pad_id` (as the data set says), 3 classes.
InputSpec padded_tokens(std::int64_t t, std::int64_t pad_id = 0) {
  auto spec = InputSpec::tokens(50, t, 3);
  spec.pad_id = pad_id;
  return spec;
}

// A tiny albert for sequences of `t` tokens over 50 ids padded with 0, 3 classes, 3 layers.
NetworkPtr tiny(std::int64_t t = 8, std::int64_t layers = 3) {
  auto config = albert(config::ModelSize::Tiny);
  config.albert.num_layers = static_cast<int>(layers);
  torch::manual_seed(0);
  return create_model(config, padded_tokens(t));
}

// (N, T) ids in [1, 50): no padding.
torch::Tensor ids(std::int64_t n, std::int64_t t, std::uint64_t seed = 1) {
  torch::manual_seed(seed);
  return torch::randint(1, 50, {n, t}, torch::kLong);
}

TEST(Albert, BaseHasThePapersParameterCount) {
  // AlbertModel of albert-base-v2: 11,683,584 parameters; the head adds 768 x 2 + 2.
  auto base = create_model(albert(config::ModelSize::Base), InputSpec::tokens(30000, 128, 2));
  EXPECT_EQ(parameter_count(*base), 11683584 + 768 * 2 + 2);
  EXPECT_EQ(base->kind(), "albert");
  EXPECT_EQ(base->layers()->size(), 3u);
}

TEST(Albert, LargeHasThePapersSizes) {
  const auto large = albert_size(config::ModelSize::Large);
  EXPECT_EQ(large.hidden_size, 1024);
  EXPECT_EQ(large.embedding_size, 128);
  EXPECT_EQ(large.num_layers, 24);
  EXPECT_EQ(large.num_heads, 16);
  EXPECT_EQ(large.intermediate_size, 4096);
  EXPECT_EQ(large.vocab_size, 30000);
  EXPECT_EQ(large.max_positions, 512);
  // AlbertModel of albert-large-v2: 17,683,968 parameters; the head adds 1024 x 2 + 2.
  auto network = create_model(albert(config::ModelSize::Large), InputSpec::tokens(30000, 128, 2));
  EXPECT_EQ(parameter_count(*network), 17683968 + 1024 * 2 + 2);
}

TEST(Albert, EveryParameterHasAHuggingFaceName) {
  auto network = tiny();
  std::set<std::string> names;
  for (const auto& p : network->named_parameters()) names.insert(albert_hugging_face_name(p.key()));
  const std::string layer = "albert.encoder.albert_layer_groups.0.albert_layers.0.";
  std::set<std::string> expected{"albert.embeddings.word_embeddings.weight",
                                 "albert.embeddings.position_embeddings.weight",
                                 "albert.embeddings.token_type_embeddings.weight",
                                 "albert.embeddings.LayerNorm.weight",
                                 "albert.embeddings.LayerNorm.bias",
                                 "albert.encoder.embedding_hidden_mapping_in.weight",
                                 "albert.encoder.embedding_hidden_mapping_in.bias",
                                 "albert.pooler.weight",
                                 "albert.pooler.bias",
                                 "classifier.weight",
                                 "classifier.bias"};
  for (const auto* module : {"attention.query.", "attention.key.", "attention.value.", "attention.dense.",
                             "attention.LayerNorm.", "ffn.", "ffn_output.", "full_layer_layer_norm."}) {
    expected.insert(layer + module + "weight");
    expected.insert(layer + module + "bias");
  }
  EXPECT_EQ(names, expected);
  EXPECT_EQ(network->named_parameters().size(), expected.size()) << "a parameter registered twice";
  EXPECT_THROW(albert_hugging_face_name("layers.3.weight"), std::invalid_argument);
}

TEST(Albert, LogitsHaveOneRowPerSequenceAndEveryParameterLearns) {
  auto network = tiny();
  network->train();
  const auto logits = network->forward(ids(4, 8));
  ASSERT_EQ(logits.sizes(), (std::vector<std::int64_t>{4, 3}));
  logits.pow(2).sum().backward();
  for (const auto& p : network->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    if (p.key().find("token_type") == std::string::npos) {
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
    }
  }
}

// The shared layer against three unshared copies of it run in its place: the same logits, and the
// shared layer's gradient is the sum of the copies' gradients.
TEST(Albert, SharedLayerGradientIsTheSumOverLayers) {
  auto config = albert(config::ModelSize::Tiny);
  config.albert.num_layers = 3;
  const auto options = albert_options(config, padded_tokens(6));
  torch::manual_seed(0);
  auto network = make_albert(options);
  network->eval();
  auto body = network->layers()[0]->as<AlbertBodyImpl>();
  ASSERT_NE(body, nullptr);
  auto shared = body->encoder()->albert_layer();
  ASSERT_EQ(body->encoder()->num_layers(), 3);
  std::vector<AlbertLayer> copies;
  for (int i = 0; i < 3; ++i) {
    copies.emplace_back(options);
    torch::NoGradGuard no_grad;
    for (auto& p : copies.back()->named_parameters()) p.value().copy_(shared->named_parameters()[p.key()]);
  }
  auto x = ids(3, 6);
  x.index_put_({0, torch::indexing::Slice(4, torch::indexing::None)}, 0);  // some padding
  const auto padding = x.eq(0);
  const auto labels = torch::tensor({0, 2, 1}, torch::kLong);
  // Shared.
  const auto loss = torch::cross_entropy_loss(network->forward(x), labels);
  loss.backward();
  // Unshared: the same stages, the copies applied in turn.
  auto h = body->encoder()->embedding_hidden_mapping_in()->forward(body->embeddings()->forward(x));
  for (auto& copy : copies) h = copy->forward(h, padding);
  auto logits = network->layers()[2]->as<AlbertClassifierImpl>()->forward(
      network->layers()[1]->as<AlbertPoolerImpl>()->forward(h));
  const auto unshared_loss = torch::cross_entropy_loss(logits, labels);
  EXPECT_NEAR(unshared_loss.item<double>(), loss.item<double>(), 1e-6);
  unshared_loss.backward();
  for (const auto& p : shared->named_parameters()) {
    auto sum = torch::zeros_like(p.value());
    for (auto& copy : copies) {
      const auto grad = copy->named_parameters()[p.key()].grad();
      ASSERT_TRUE(grad.defined()) << p.key();
      EXPECT_GT(grad.abs().sum().item<double>(), 0.0) << p.key();
      sum += grad;
    }
    EXPECT_TRUE(torch::allclose(p.value().grad(), sum, 1e-5, 1e-6))
        << p.key() << ": max difference " << (p.value().grad() - sum).abs().max().item<double>();
  }
}

TEST(Albert, PaddingDoesNotChangeTheLogits) {
  auto network = tiny(/*t=*/12);
  network->eval();
  torch::NoGradGuard no_grad;
  const auto short_ids = ids(2, 7);
  auto padded = torch::zeros({2, 12}, torch::kLong);
  padded.narrow(1, 0, 7).copy_(short_ids);
  const auto a = network->forward(short_ids);
  const auto b = network->forward(padded);
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << a << b;
  // Where the same positions hold tokens instead, the logits change: the mask, not chance, kept them.
  auto unpadded = padded.clone();
  unpadded.narrow(1, 7, 5).fill_(3);
  EXPECT_FALSE(torch::allclose(a, network->forward(unpadded), 1e-3, 1e-4));
}

TEST(Albert, PadIdIsTheDataSets) {
  torch::manual_seed(0);
  auto network = create_model(albert(config::ModelSize::Tiny), padded_tokens(12, /*pad_id=*/5));
  network->eval();
  torch::NoGradGuard no_grad;
  const auto short_ids = ids(2, 7);
  auto padded = torch::full({2, 12}, 5, torch::kLong);
  padded.narrow(1, 0, 7).copy_(short_ids.masked_fill(short_ids.eq(5), 6));
  EXPECT_TRUE(
      torch::allclose(network->forward(padded.narrow(1, 0, 7)), network->forward(padded), 1e-5, 1e-6));
  // The padding row of the embedding starts at zero, as in BERT.
  auto body = network->layers()[0]->as<AlbertBodyImpl>();
  EXPECT_EQ(body->embeddings()->named_parameters()["word_embeddings.weight"][5].abs().sum().item<double>(),
            0.0);
}

TEST(Albert, UnpaddedDataMasksNothing) {
  torch::manual_seed(0);
  auto network = create_model(albert(config::ModelSize::Tiny), padded_tokens(12, /*pad_id=*/-1));
  network->eval();
  torch::NoGradGuard no_grad;
  const auto short_ids = ids(2, 7);
  auto with_zeros = torch::zeros({2, 12}, torch::kLong);
  with_zeros.narrow(1, 0, 7).copy_(short_ids);
  // Id 0 is a token like any other: attended to, and its embedding row drawn as the others are.
  EXPECT_FALSE(torch::allclose(network->forward(short_ids), network->forward(with_zeros), 1e-3, 1e-4));
  auto body = network->layers()[0]->as<AlbertBodyImpl>();
  EXPECT_GT(body->embeddings()->named_parameters()["word_embeddings.weight"][0].abs().sum().item<double>(),
            0.0);
}

TEST(Albert, OverridesApplyOverTheSize) {
  auto config = albert(config::ModelSize::Base);
  config.albert.hidden_size = 64;
  config.albert.num_heads = 4;
  config.albert.intermediate_size = 96;
  config.albert.num_layers = 1;
  config.albert.vocab_size = 100;
  const auto options = albert_options(config, InputSpec::tokens(50, 16, 2));
  EXPECT_EQ(options.hidden_size, 64);
  EXPECT_EQ(options.embedding_size, 128);
  EXPECT_EQ(options.vocab_size, 100);
  EXPECT_EQ(albert_options(albert(config::ModelSize::Base), InputSpec::tokens(50, 16, 2)).vocab_size, 50);
}

void expect_refused(const config::ModelConfig& config, const InputSpec& input, const std::string& says) {
  try {
    create_model(config, input);
    FAIL() << "expected a refusal naming " << says;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Albert, RefusesWhatItCannotTake) {
  auto heads = albert(config::ModelSize::Tiny);
  heads.albert.num_heads = 3;
  expect_refused(heads, InputSpec::tokens(50, 8, 2), "model.albert.num_heads");
  expect_refused(albert(config::ModelSize::Tiny), InputSpec::tokens(50, 200, 2),
                 "model.albert.max_positions");
  auto vocab = albert(config::ModelSize::Tiny);
  vocab.albert.vocab_size = 10;
  expect_refused(vocab, InputSpec::tokens(50, 8, 2), "model.albert.vocab_size");
  expect_refused(albert(config::ModelSize::Tiny), padded_tokens(8, /*pad_id=*/50), "pad id 50");
  expect_refused(albert(config::ModelSize::Tiny), InputSpec::image(1, 28, 28, 10), "token");
}

}  // namespace
}  // namespace dtrain::models
