// rank-dAD's compression: the top singular triplets of a layer's weight gradient M = Δᵀ X
// (d_out x d_in), found by deflated power iteration from the layer's input X (N x d_in) and its
// output gradient Δ (N x d_out) without ever forming M (see Note [rank-dAD's power iteration]).
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

namespace dtrain::parallel {

struct PowerIterationOptions {
  int rank = 4;             // components at most
  int iterations = 10;      // power iterations per component at most
  double tolerance = 1e-3;  // stop a component when its vector moves less than this (relative)
};

// M ~ left * rightᵀ with left = [σ_1 b_1, ..., σ_k b_k] (d_out x k) and right = [c_1, ..., c_k]
// (d_in x k), k <= options.rank: fewer when M's rank is lower (a component whose σ is below the
// rounding of the first, or not a number, ends the factorisation).
struct LowRankFactors {
  torch::Tensor left;
  torch::Tensor right;
  std::int64_t rank() const { return left.defined() ? left.size(1) : 0; }
};

// delta (N, d_out) and input (N, d_in), both 2-D and of one dtype; start vectors drawn from
// `generator` (uniform in [0, 1), as the authors do).
LowRankFactors factor_outer_product(const torch::Tensor& delta, const torch::Tensor& input,
                                    const PowerIterationOptions& options, at::Generator generator);

}  // namespace dtrain::parallel
