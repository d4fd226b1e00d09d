// Note [Normalisation under CPU autocast]: under bf16 autocast on the CPU every op a model of one's
// own commonly puts after a Linear layer gets the dtype PyTorch 2.x's autocast gives it, on 1.13 too:
// LayerNorm and GroupNorm with float32 weights take bfloat16 and return bfloat16 (computed in float32),
// the activations and softmax stay bfloat16, the losses are float32; and gradients flow through them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/optim/Autocast.h"

namespace dtrain::optim {
namespace {

struct Expected {
  std::string op;
  std::function<torch::Tensor(const torch::Tensor& h)> run;
  at::ScalarType dtype;
};

TEST(AutocastCpuKernels, EachOpAfterALinearLayerGetsPyTorch2sDtype) {
  torch::manual_seed(0);
  torch::nn::Linear linear(8, 8);
  torch::nn::LayerNorm layer_norm(torch::nn::LayerNormOptions({8}));
  torch::nn::GroupNorm group_norm(2, 8);
  torch::nn::BatchNorm1d batch_norm(8);
  const auto x = torch::randn({4, 8});
  const auto target = torch::randint(0, 8, {4});
  const std::vector<Expected> table{
      {"layer_norm", [&](const torch::Tensor& h) { return layer_norm(h); }, at::kBFloat16},
      {"group_norm", [&](const torch::Tensor& h) { return group_norm(h); }, at::kBFloat16},
      {"batch_norm", [&](const torch::Tensor& h) { return batch_norm(h); }, at::kBFloat16},
      {"softmax", [](const torch::Tensor& h) { return torch::softmax(h, -1); }, at::kBFloat16},
      {"log_softmax", [](const torch::Tensor& h) { return torch::log_softmax(h, -1); }, at::kBFloat16},
      {"gelu", [](const torch::Tensor& h) { return torch::gelu(h); }, at::kBFloat16},
      {"tanh", [](const torch::Tensor& h) { return torch::tanh(h); }, at::kBFloat16},
      {"cross_entropy",
       [&](const torch::Tensor& h) { return torch::nn::functional::cross_entropy(h, target); }, at::kFloat},
      {"mse_loss", [&](const torch::Tensor& h) { return torch::mse_loss(h, x); }, at::kFloat},
  };
  AutocastGuard autocast(true, at::kBFloat16, at::kCPU);
  for (const auto& row : table) {
    linear->zero_grad();
    const auto h = linear(x);
    ASSERT_EQ(h.scalar_type(), at::kBFloat16);
    torch::Tensor y;
    ASSERT_NO_THROW(y = row.run(h)) << row.op;
    EXPECT_EQ(y.scalar_type(), row.dtype) << row.op;
    y.to(at::kFloat).sum().backward();
    EXPECT_TRUE(linear->weight.grad().defined()) << row.op;
    EXPECT_EQ(linear->weight.grad().scalar_type(), at::kFloat) << row.op;
  }
}

// What 2.x's mixed kernel computes: the bfloat16 input widened, normalised with the float32
// weight and bias in float32, the result rounded to bfloat16.
TEST(AutocastCpuKernels, MixedLayerNormIsTheFloat32OneRounded) {
  torch::manual_seed(1);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({6}));
  {
    torch::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5);
    norm->bias.uniform_(-0.5, 0.5);
  }
  const auto h = torch::randn({3, 6}).to(at::kBFloat16);
  const auto expected = norm(h.to(at::kFloat)).to(at::kBFloat16);
  AutocastGuard autocast(true, at::kBFloat16, at::kCPU);
  const auto y = norm(h);
  EXPECT_TRUE(torch::equal(y, expected));
}

// Outside autocast nothing changes: a bfloat16 input with float32 weights is the user's own mix,
// refused by the op as in PyTorch.
TEST(AutocastCpuKernels, OutsideAutocastTheOpIsUnchanged) {
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({4}));
  const auto x = torch::randn({2, 4});
  EXPECT_TRUE(torch::equal(norm(x), at::layer_norm(x, {4}, norm->weight, norm->bias, 1e-5)));
}

}  // namespace
}  // namespace dtrain::optim
