// The multi-tensor updates (optim.foreach) against LibTorch's per-tensor ones: the same weights
// and state after many steps, for sgd (plain, momentum, nesterov, weight decay), adam and adamw,
// with a parameter that misses its gradient in some steps; state saved by one loads into the other.
// And the fused steps that skip themselves on a flag on the device (FusedStep) against the
// multi-tensor ones, where this LibTorch has the kernels on the CPU (2.x).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/optim/ForeachOptimizers.h"
#include "dtrain/optim/FusedKernels.h"
#include "dtrain/optim/OptimizerState.h"
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
  per_tensor_config.foreach = config::AutoBool::False;
  auto foreach_config = GetParam();
  foreach_config.foreach = config::AutoBool::True;
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

// Steps 4, 9 and 10 overflow: the fused optimizer gets the flag (and gradients holding inf, which it
// must not read), the reference takes no step.
bool overflows(int step) {
  return step == 4 || step == 9 || step == 10;
}

NamedParameters named(const std::vector<torch::Tensor>& params) {
  NamedParameters out;
  for (std::size_t i = 0; i < params.size(); ++i) out.emplace_back("p" + std::to_string(i), params[i]);
  return out;
}

FusedKernel kernel_of(const config::OptimConfig& config) {
  return config.name == "sgd" ? FusedKernel::Sgd : FusedKernel::Adam;
}

class FusedEqualsForeach : public ::testing::TestWithParam<config::OptimConfig> {};

// parameters(seed) on `device`, each a leaf.
std::vector<torch::Tensor> parameters_on(std::uint64_t seed, const torch::Device& device) {
  auto out = parameters(seed);
  for (auto& p : out) p = p.detach().to(device).requires_grad_();
  return out;
}

void set_gradients_on(const std::vector<torch::Tensor>& params, int step) {
  set_gradients(params, step);  // drawn on the CPU, so every device sees the same numbers
  for (const auto& p : params) {
    if (p.grad().defined()) p.mutable_grad() = p.grad().to(p.device());
  }
}

// The fused steps on `device` against the multi-tensor ones there, through 40 steps with three
// overflows, a checkpoint of dtrain's named state and a resume. False where this LibTorch has no
// such kernel on `device`, having checked that the fused step then declines and touches nothing.
bool fused_matches_foreach(config::OptimConfig config, const torch::Device& device) {
  config.foreach = config::AutoBool::True;
  auto a = parameters_on(7, device);
  auto b = parameters_on(7, device);
  auto reference = create_optimizer(a, config);
  auto fused = create_optimizer(b, config);
  const auto flag = [&](double value) {
    return torch::full({1}, value, torch::TensorOptions().device(device));
  };
  if (!fused_on(kernel_of(config), device)) {
    set_gradients_on(b, 1);
    fused->step();  // gives SGD its momentum buffers, so only the kernel's absence declines
    set_gradients_on(b, 2);
    std::vector<torch::Tensor> before;
    for (const auto& p : b) before.push_back(p.detach().clone());
    EXPECT_FALSE(dynamic_cast<FusedStep&>(*fused).step_unless(flag(0.0)));
    EXPECT_EQ(max_difference(b, before), 0.0);
    return false;
  }
  // What MixedPrecision::step does with the flag: the fused step where the optimizer can take it
  // (not SGD's first, which starts the momentum buffers), otherwise the flag read on the host.
  // Overflowing steps also put an inf into the gradients, which a skipped step must not read.
  const auto step_with_flag = [&](torch::optim::Optimizer& optimizer,
                                  const std::vector<torch::Tensor>& params, int step) {
    if (overflows(step)) {
      for (const auto& p : params) {
        if (p.grad().defined()) p.mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
      }
    }
    const auto found_inf = flag(overflows(step) ? 1.0 : 0.0);
    if (dynamic_cast<FusedStep&>(optimizer).step_unless(found_inf)) return;
    // Only SGD's first step of a parameter, which starts its momentum buffer, declines: step 0, and
    // step 1 for the last parameter, which has no gradient at step 0.
    EXPECT_TRUE(config.name == "sgd" && step <= 1) << "the fused step declined at step " << step;
    if (found_inf.item<float>() == 0.0F) optimizer.step();
  };
  for (int step = 0; step < 30; ++step) {
    set_gradients_on(a, step);
    set_gradients_on(b, step);
    if (!overflows(step)) reference->step();
    step_with_flag(*fused, b, step);
  }
  EXPECT_LE(max_difference(a, b), 1e-6);
  EXPECT_GT(max_difference(a, parameters_on(7, device)), 1e-3);

  // The state dtrain saves (step counts included: 27 steps taken of 30, fewer for the parameter
  // that missed gradients) is the reference's.
  const auto want = named_optimizer_state(*reference, named(a));
  const auto got = named_optimizer_state(*fused, named(b));
  EXPECT_EQ(want.size(), got.size());
  for (const auto& [key, value] : want) {
    if (!got.count(key)) {
      ADD_FAILURE() << key << " missing";
      continue;
    }
    EXPECT_LE((value.to(torch::kDouble) - got.at(key).to(value.device(), torch::kDouble))
                  .abs()
                  .max()
                  .item<double>(),
              1e-6)
        << key;
  }
  if (config.name != "sgd") {
    EXPECT_EQ(got.at("optimizer/p0/step").item<std::int64_t>(), 27);
  }

  // Loaded into a fresh optimizer (whose counts restart from the loaded ones), both go on alike.
  auto c = parameters_on(0, device);
  for (std::size_t i = 0; i < c.size(); ++i) c[i].detach().copy_(b[i].detach());
  auto resumed = create_optimizer(c, config);
  load_named_optimizer_state(*resumed, named(c), got);
  for (int step = 30; step < 40; ++step) {
    set_gradients_on(b, step);
    set_gradients_on(c, step);
    step_with_flag(*fused, b, step);
    step_with_flag(*resumed, c, step);
  }
  EXPECT_LE(max_difference(b, c), 1e-6);
  return true;
}

TEST_P(FusedEqualsForeach, SkipsOnTheDeviceFlagAndCountsOnlyTheStepsTaken) {
  const bool on_cpu = fused_matches_foreach(GetParam(), torch::kCPU);
  const bool on_gpu =
      torch::cuda::is_available() && fused_matches_foreach(GetParam(), torch::Device(torch::kCUDA, 0));
  if (!on_cpu && !on_gpu) {
    GTEST_SKIP() << "no fused " << GetParam().name << " kernel on this machine's devices in LibTorch "
                 << TORCH_VERSION << " (checked: the fused step declines and touches nothing)";
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, FusedEqualsForeach,
                         ::testing::Values(with("sgd", 0.9, false, 0.0), with("sgd", 0.9, true, 5e-4),
                                           with("adam", 0.0, false, 0.0), with("adam", 0.0, false, 1e-2),
                                           with("adamw", 0.0, false, 1e-2)),
                         [](const auto& info) {
                           const auto& c = info.param;
                           return c.name + (c.momentum > 0 ? "_momentum" : "") +
                                  (c.nesterov ? "_nesterov" : "") + (c.weight_decay > 0 ? "_decay" : "");
                         });

TEST(ForeachOptimizers, AutoIsPerTensorOnTheCpu) {
  auto config = with("sgd", 0.9, false, 0.0);
  EXPECT_EQ(config.foreach, config::AutoBool::Auto);
  auto optimizer = create_optimizer(parameters(1), config);
  EXPECT_EQ(dynamic_cast<ForeachSGD*>(optimizer.get()), nullptr);
}

TEST(ForeachOptimizers, LbfgsRefusesForeachByName) {
  auto config = with("lbfgs", 0.0, false, 0.0);
  config.lr = 1.0;
  config.foreach = config::AutoBool::True;
  try {
    create_optimizer(parameters(1), config);
    FAIL() << "lbfgs accepted optim.foreach: true";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("optim.foreach"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::optim
