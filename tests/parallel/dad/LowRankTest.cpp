// rank-dAD's power iteration against LibTorch's SVD: the components are M's top singular triplets,
// a matrix of rank k gives k components, and M is never formed.
#include "dtrain/parallel/dad/LowRank.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace dtrain::parallel {
namespace {

at::Generator generator(std::uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

TEST(LowRank, TopComponentsAreTheSvdsTopSingularTriplets) {
  torch::manual_seed(11);
  const auto delta = torch::randn({40, 12}, torch::kDouble);    // (N, d_out)
  const auto input = torch::randn({40, 9}, torch::kDouble);     // (N, d_in)
  const auto m = delta.t().mm(input);                           // (12, 9)
  const auto svd = at::linalg_svd(m, /*full_matrices=*/false);  // (U, S, Vh)
  const auto& s = std::get<1>(svd);
  const auto factors = factor_outer_product(delta, input, {3, 2000, 0.0}, generator(1));
  ASSERT_EQ(factors.rank(), 3);
  // σ_k = ‖left_k‖ and the best rank-3 approximation.
  for (int k = 0; k < 3; ++k)
    EXPECT_NEAR(factors.left.select(1, k).norm().item<double>(), s[k].item<double>(), 1e-8);
  const auto best = std::get<0>(svd)
                        .narrow(1, 0, 3)
                        .mm(torch::diag(s.narrow(0, 0, 3)))
                        .mm(std::get<2>(svd).narrow(0, 0, 3));
  EXPECT_LT((factors.left.mm(factors.right.t()) - best).abs().max().item<double>(), 1e-8);
}

TEST(LowRank, AMatrixOfRankTwoGivesTwoComponentsThatRebuildItExactly) {
  torch::manual_seed(12);
  // Δ = A B with A (N, 2): M = Δᵀ X has rank 2.
  const auto delta = torch::randn({30, 2}, torch::kDouble).mm(torch::randn({2, 10}, torch::kDouble));
  const auto input = torch::randn({30, 7}, torch::kDouble);
  const auto factors = factor_outer_product(delta, input, {6, 1000, 0.0}, generator(2));
  EXPECT_EQ(factors.rank(), 2);
  const auto m = delta.t().mm(input);
  EXPECT_LT(
      (factors.left.mm(factors.right.t()) - m).abs().max().item<double>() / m.abs().max().item<double>(),
      1e-10);
}

TEST(LowRank, RightFactorsAreOrthonormalAndAZeroGradientHasNoComponent) {
  torch::manual_seed(13);
  const auto delta = torch::randn({16, 8}, torch::kDouble);
  const auto input = torch::randn({16, 8}, torch::kDouble);
  const auto factors = factor_outer_product(delta, input, {4, 500, 0.0}, generator(3));
  ASSERT_EQ(factors.rank(), 4);
  const auto gram = factors.right.t().mm(factors.right);
  EXPECT_LT((gram - torch::eye(4, torch::kDouble)).abs().max().item<double>(), 1e-8);
  EXPECT_EQ(
      factor_outer_product(torch::zeros({5, 3}), torch::randn({5, 4}), {4, 10, 1e-3}, generator(4)).rank(),
      0);
}

}  // namespace
}  // namespace dtrain::parallel
