// Activation recomputation (models/Recompute.h): the same gradients, bit for bit, as keeping the
// activations; the random draws, BatchNorm's statistics and the generators after backward as
// without it; the choice of blocks; and the settings it refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/models/ModelFactory.h"
#include "dtrain/models/Network.h"
#include "dtrain/models/Recompute.h"
#include "dtrain/optim/Autocast.h"

namespace dtrain::models {
namespace {

using config::ActivationCheckpointing;

NetworkPtr tiny_transformer(double dropout) {
  config::ModelConfig cfg;
  cfg.name = "transformer";
  cfg.dim = 16;
  cfg.heads = 2;
  cfg.depth = 3;
  cfg.dropout = dropout;
  torch::manual_seed(3);
  return create_model(cfg, InputSpec::image(1, 8, 8, 4));
}

struct Pass {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;
  torch::Tensor next_draw;  // the CPU generator's next number after backward
};

Pass train_pass(Network& net, const torch::Tensor& x, const torch::Tensor& y) {
  net.zero_grad();
  torch::manual_seed(11);
  auto loss = torch::nn::functional::cross_entropy(net.forward(x), y);
  loss.backward();
  Pass out{loss.detach(), {}, torch::rand({4})};
  for (const auto& p : net.parameters()) out.grads.push_back(p.grad().clone());
  return out;
}

void expect_identical(const Pass& a, const Pass& b) {
  EXPECT_TRUE(torch::equal(a.loss, b.loss));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(torch::equal(a.grads[i], b.grads[i])) << "grad " << i;
  EXPECT_TRUE(torch::equal(a.next_draw, b.next_draw));
}

TEST(Recompute, GradientsEqualKeepingTheActivationsBitForBitWithDropout) {
  torch::manual_seed(5);
  const auto x = torch::randn({6, 1, 8, 8});
  const auto y = torch::randint(0, 4, {6});
  auto kept = tiny_transformer(0.2);
  auto recomputed = tiny_transformer(0.2);
  apply_activation_checkpointing(*recomputed, ActivationCheckpointing::Full, 0);
  ASSERT_TRUE(recomputed->any_recomputed());
  for (std::size_t b : recomputed->blocks()) EXPECT_TRUE(recomputed->recomputed(b));
  // Dropout draws its masks in forward; the second forward must draw the same ones.
  expect_identical(train_pass(*kept, x, y), train_pass(*recomputed, x, y));
}

TEST(Recompute, SelectiveEqualsToo) {
  torch::manual_seed(5);
  const auto x = torch::randn({4, 1, 8, 8});
  const auto y = torch::randint(0, 4, {4});
  auto kept = tiny_transformer(0.0);
  auto recomputed = tiny_transformer(0.0);
  apply_activation_checkpointing(*recomputed, ActivationCheckpointing::Selective, 2);
  const auto& blocks = recomputed->blocks();
  ASSERT_EQ(blocks.size(), 3U);
  EXPECT_FALSE(recomputed->recomputed(blocks[0]));
  EXPECT_TRUE(recomputed->recomputed(blocks[1]));
  EXPECT_FALSE(recomputed->recomputed(blocks[2]));
  expect_identical(train_pass(*kept, x, y), train_pass(*recomputed, x, y));
}

// A model of one's own: each stage a block; BatchNorm's running statistics and count are updated
// once per batch, as without recomputation, and the first stage (on raw data) still learns.
struct ConvBnImpl : torch::nn::Module {
  ConvBnImpl(std::int64_t in, std::int64_t out)
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(out))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(bn(conv(x))); }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
};
TORCH_MODULE(ConvBn);

NetworkPtr conv_net() {
  torch::manual_seed(9);
  torch::nn::Sequential layers(ConvBn(1, 4), ConvBn(4, 4), torch::nn::Flatten(),
                               torch::nn::Linear(4 * 6 * 6, 3));
  return network("convnet", layers);
}

TEST(Recompute, BatchNormCountsEachBatchOnceAndRawDataStagesLearn) {
  torch::manual_seed(5);
  const auto x = torch::randn({5, 1, 6, 6});
  const auto y = torch::randint(0, 3, {5});
  auto kept = conv_net();
  auto recomputed = conv_net();
  EXPECT_EQ(recomputed->blocks(), (std::vector<std::size_t>{0, 1, 2, 3}));
  apply_activation_checkpointing(*recomputed, ActivationCheckpointing::Full, 0);
  for (int step = 0; step < 2; ++step)
    expect_identical(train_pass(*kept, x, y), train_pass(*recomputed, x, y));
  const auto kept_buffers = kept->buffers();
  const auto recomputed_buffers = recomputed->buffers();
  ASSERT_EQ(kept_buffers.size(), recomputed_buffers.size());
  for (std::size_t i = 0; i < kept_buffers.size(); ++i)
    EXPECT_TRUE(torch::equal(kept_buffers[i], recomputed_buffers[i])) << "buffer " << i;
  EXPECT_EQ(recomputed->named_buffers()["layers.0.bn.num_batches_tracked"].item<std::int64_t>(), 2);
  // The first convolution saw only raw data, yet got its gradient.
  EXPECT_GT(recomputed->named_parameters()["layers.0.conv.weight"].grad().abs().sum().item<double>(), 0.0);
}

// The engine runs backward where autocast may be off: the second forward must compute in bfloat16
// as the first did.
TEST(Recompute, RecomputesUnderTheForwardsAutocast) {
  auto mlp = [] {
    torch::manual_seed(4);
    torch::nn::Sequential layers(torch::nn::Flatten(), torch::nn::Linear(16, 12), torch::nn::ReLU(),
                                 torch::nn::Linear(12, 3));
    return network("mlp", layers);
  };
  torch::manual_seed(5);
  const auto x = torch::randn({5, 1, 4, 4});
  const auto y = torch::randint(0, 3, {5});
  auto kept = mlp();
  auto recomputed = mlp();
  apply_activation_checkpointing(*recomputed, ActivationCheckpointing::Full, 0);
  auto pass = [&](Network& net) {
    optim::AutocastGuard autocast(true, at::kBFloat16, at::kCPU);
    return train_pass(net, x, y);
  };
  const auto a = pass(*kept);
  expect_identical(a, pass(*recomputed));
  // In float32 the gradients differ: the comparison above sees the precision.
  EXPECT_FALSE(torch::equal(a.grads.front(), train_pass(*kept, x, y).grads.front()));
}

TEST(Recompute, StagesKeepTheirParametersAndNames) {
  auto net = tiny_transformer(0.0);
  const auto before = net->named_parameters().keys();
  apply_activation_checkpointing(*net, ActivationCheckpointing::Full, 0);
  EXPECT_EQ(net->named_parameters().keys(), before);
  const auto stages = net->stages();
  const auto block = net->blocks().front();
  const auto inner = net->layers()[block]->parameters();
  const auto wrapped = stages[block].ptr()->parameters();
  ASSERT_EQ(inner.size(), wrapped.size());
  for (std::size_t i = 0; i < inner.size(); ++i) EXPECT_TRUE(inner[i].is_same(wrapped[i]));
}

TEST(Recompute, EvaluationRecordsNothingAndMatches) {
  auto kept = tiny_transformer(0.0);
  auto recomputed = tiny_transformer(0.0);
  apply_activation_checkpointing(*recomputed, ActivationCheckpointing::Full, 0);
  const auto x = torch::randn({2, 1, 8, 8});
  torch::NoGradGuard no_grad;
  const auto out = recomputed->forward(x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(torch::equal(out, kept->forward(x)));
}

TEST(Recompute, BlocksChosenByMode) {
  using V = std::vector<std::size_t>;
  EXPECT_EQ(recomputed_blocks(ActivationCheckpointing::None, 0, 4), V{});
  EXPECT_EQ(recomputed_blocks(ActivationCheckpointing::Full, 0, 4), (V{0, 1, 2, 3}));
  EXPECT_EQ(recomputed_blocks(ActivationCheckpointing::Selective, 0, 5), (V{1, 3}));
  EXPECT_EQ(recomputed_blocks(ActivationCheckpointing::Selective, 3, 7), (V{2, 5}));
  EXPECT_EQ(recomputed_blocks(ActivationCheckpointing::Selective, 1, 2), (V{0, 1}));
}

TEST(Recompute, RefusesWhatItCannotHonour) {
  auto expect_refused = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "expected std::invalid_argument mentioning " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  config::ModelConfig cfg;
  cfg.name = "lenet5";
  auto lenet = create_model(cfg, InputSpec::image(1, 28, 28, 10));
  EXPECT_TRUE(lenet->blocks().empty());
  expect_refused([&] { apply_activation_checkpointing(*lenet, ActivationCheckpointing::Full, 0); },
                 "model lenet5 has no blocks");
  auto net = tiny_transformer(0.0);
  expect_refused(
      [&] { apply_activation_checkpointing(*net, ActivationCheckpointing::Full, 2); },
      "train.activation_checkpointing_every: 2 applies to train.activation_checkpointing: selective");
  expect_refused([&] { apply_activation_checkpointing(*net, ActivationCheckpointing::Selective, 4); },
                 "more than model transformer's 3 blocks");
  apply_activation_checkpointing(*lenet, ActivationCheckpointing::None, 0);
  EXPECT_FALSE(lenet->any_recomputed());
}

}  // namespace
}  // namespace dtrain::models
