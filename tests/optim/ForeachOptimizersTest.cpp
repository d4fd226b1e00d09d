// The multi-tensor updates (optim.foreach) against LibTorch's per-tensor ones: the same weights
// and state after many steps, for sgd (plain, momentum, nesterov, weight decay), adam and adamw,
// with a parameter that misses its gradient in some steps; state saved by one loads into the other.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/optim/ForeachOptimizers.h"
#include "dtrain/optim/Optimizers.h"

namespace dtrain::optim {
namespace {

std::vector<torch::Tensor> parameters(std::uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({16, 8}).requires_grad_(), torch::randn({8}).requires_grad_(),
          torch::randn({4, 3, 3, 3}).requires_grad_(), torch::randn({1}).requires_grad_()};
}

// Step `step` gives every parameter a gradient drawn from the step's seed, except the last one on
// every third step (a layer that took no part), which keeps no gradient.
void set_gradients(const std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(1000 + step);
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& grad = params[i].mutable_grad();
    if (i + 1 == params.size() && step % 3 == 0) {
      grad = torch::Tensor();
      continue;
    }
    grad = torch::randn_like(params[i]) * (step % 2 ? 1.0 : 1e-3);
  }
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

config::OptimConfig with(const std::string& name, double momentum, bool nesterov, double weight_decay) {
  config::OptimConfig config;
  config.name = name;
  config.lr = name == "sgd" ? 0.05 : 1e-3;
  config.momentum = momentum;
  config.nesterov = nesterov;
  config.weight_decay = weight_decay;
  return config;
}

class ForeachEqualsPerTensor : public ::testing::TestWithParam<config::OptimConfig> {};

TEST_P(ForeachEqualsPerTensor, SameWeightsAfterManySteps) {
  auto per_tensor_config = GetParam();
  per_tensor_config.foreach = "false";
  auto foreach_config = GetParam();
  foreach_config.foreach = "true";
  auto a = parameters(7);
  auto b = parameters(7);
  auto per_tensor = create_optimizer(a, per_tensor_config);
  auto foreach = create_optimizer(b, foreach_config);
  ASSERT_EQ(dynamic_cast<ForeachSGD*>(per_tensor.get()), nullptr);
  ASSERT_TRUE(dynamic_cast<ForeachSGD*>(foreach.get()) || dynamic_cast<ForeachAdam*>(foreach.get()) ||
              dynamic_cast<ForeachAdamW*>(foreach.get()));
  for (int step = 0; step < 30; ++step) {
    set_gradients(a, step);
    set_gradients(b, step);
    per_tensor->step();
    foreach
      ->step();
  }
  EXPECT_LE(max_difference(a, b), 1e-6);
  EXPECT_GT(max_difference(a, parameters(7)), 1e-3);  // the weights moved

  // The state is LibTorch's: the per-tensor optimizer loads the foreach one's and both go on alike.
  std::stringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    save_optimizer_state(*foreach, archive);
    archive.save_to(bytes);
  }
  auto c = parameters(0);
  for (std::size_t i = 0; i < c.size(); ++i) c[i].detach().copy_(b[i].detach());
  auto resumed = create_optimizer(c, per_tensor_config);
  torch::serialize::InputArchive archive;
  archive.load_from(bytes);
  load_optimizer_state(*resumed, archive);
  for (int step = 30; step < 40; ++step) {
    set_gradients(b, step);
    set_gradients(c, step);
    foreach
      ->step();
    resumed->step();
  }
  EXPECT_LE(max_difference(b, c), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ForeachEqualsPerTensor,
                         ::testing::Values(with("sgd", 0.0, false, 0.0), with("sgd", 0.9, false, 0.0),
                                           with("sgd", 0.9, true, 5e-4), with("sgd", 0.0, false, 1e-2),
                                           with("adam", 0.0, false, 0.0), with("adam", 0.0, false, 1e-2),
                                           with("adamw", 0.0, false, 0.0), with("adamw", 0.0, false, 1e-2)),
                         [](const auto& info) {
                           const auto& c = info.param;
                           return c.name + (c.momentum > 0 ? "_momentum" : "") +
                                  (c.nesterov ? "_nesterov" : "") + (c.weight_decay > 0 ? "_decay" : "");
                         });

TEST(ForeachOptimizers, AutoIsPerTensorOnTheCpu) {
  auto config = with("sgd", 0.9, false, 0.0);
  EXPECT_EQ(config.foreach, "auto");
  auto optimizer = create_optimizer(parameters(1), config);
  EXPECT_EQ(dynamic_cast<ForeachSGD*>(optimizer.get()), nullptr);
}

TEST(ForeachOptimizers, LbfgsRefusesForeachByName) {
  auto config = with("lbfgs", 0.0, false, 0.0);
  config.lr = 1.0;
  config.foreach = "true";
  try {
    create_optimizer(parameters(1), config);
    FAIL() << "lbfgs accepted optim.foreach: true";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("optim.foreach"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::optim
