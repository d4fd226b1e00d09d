// See LowRank.h.
#include "dtrain/parallel/dad/LowRank.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrain::parallel {

// Note [rank-dAD's power iteration]
// After Hotelling: for k = 1..r, start from b ~ U(0, 1), repeat b <- M Mᵀ b - Σ_{j<k} σ_j² b_j (b_jᵀ b)
// and normalise; then σ_k = ‖Mᵀ b‖ and c_k = Mᵀ b / σ_k (arXiv 2102.09631; bbradt/catalyst-dad,
// utils/power_iteration_BC.py). M Mᵀ b is computed as Δᵀ (X (Xᵀ (Δ b))): four products with
// N-long intermediates, never the d_out x d_in matrix, cheaper than the authors' N x N Gram matrix
// whenever one vector is iterated. What we do differently, and why:
// - every iterate is also orthogonalised against the b_j found before (Gram-Schmidt): deflation
//   alone lets rounding reintroduce earlier directions, and the components must be orthogonal for
//   the factorisation to be exact at full rank (rankdad at full rank equals dad);
// - a component stops early when b moves less than `tolerance` (relative); the authors compare b
//   with the previous component's vector instead, and drop the last component found (`eigs[1:-1]`),
//   which loses one component every time: we keep every component whose σ is positive;
// - σ comes from ‖Mᵀ b‖ = ‖Xᵀ (Δ b)‖ directly.
LowRankFactors factor_outer_product(const torch::Tensor& delta, const torch::Tensor& input,
                                    const PowerIterationOptions& options, at::Generator generator) {
  TORCH_CHECK(delta.dim() == 2 && input.dim() == 2 && delta.size(0) == input.size(0),
              "rank-dAD: expected Δ (N, d_out) and X (N, d_in), found ", delta.sizes(), " and ",
              input.sizes());
  torch::NoGradGuard no_grad;
  const auto d_out = delta.size(1);
  // What rounding leaves of M Mᵀ's largest eigenvalue: below it the rest of M is noise, and
  // iterating on noise would only bring back rounding errors of the components already found.
  const double epsilon = (delta.scalar_type() == torch::kDouble ? 1e-15 : 1e-6) *
                         static_cast<double>(std::max(d_out, input.size(1)));
  double largest = 0.0;  // σ_1²
  const auto mmt = [&](const torch::Tensor& b) { return delta.t().mv(input.mv(input.t().mv(delta.mv(b)))); };
  std::vector<torch::Tensor> bs, sigmas_b, cs;
  torch::Tensor b_basis;  // (d_out, k) of the b_j found so far
  torch::Tensor weights;  // σ_j² of those
  const auto orthogonalise = [&](torch::Tensor v) {
    return b_basis.defined() ? v - b_basis.mv(b_basis.t().mv(v)) : v;
  };
  for (int k = 0; k < options.rank && k < d_out; ++k) {
    auto b = orthogonalise(
        torch::rand({d_out}, generator, delta.options().device(torch::kCPU)).to(delta.device()));
    double norm = b.norm().item<double>();
    if (!(norm > 0)) break;
    b = b / norm;
    bool exhausted = false;
    for (int i = 0; i < options.iterations; ++i) {
      auto next = mmt(b);
      if (b_basis.defined()) next = next - b_basis.mv(weights * b_basis.t().mv(b));
      next = orthogonalise(next);
      norm = next.norm().item<double>();
      if (!std::isfinite(norm) || norm <= largest * epsilon) {
        exhausted = true;
        break;
      }
      next = next / norm;
      const double moved = (next - b).norm().item<double>();
      b = next;
      if (moved < options.tolerance) break;
    }
    if (exhausted && k > 0) break;
    const auto v = input.t().mv(delta.mv(b));  // Mᵀ b, (d_in)
    const double sigma = v.norm().item<double>();
    if (!std::isfinite(sigma) || sigma == 0 || sigma * sigma <= largest * epsilon) break;
    if (k == 0) largest = sigma * sigma;
    bs.push_back(b);
    sigmas_b.push_back(b * sigma);
    cs.push_back(v / sigma);
    b_basis = torch::stack(bs, 1);
    weights = torch::stack(sigmas_b, 1).norm(2, 0).pow(2);
  }
  if (bs.empty()) return {};
  return {torch::stack(sigmas_b, 1), torch::stack(cs, 1)};
}

}  // namespace dtrain::parallel
