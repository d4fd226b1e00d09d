// The autograd nodes a torch::nn::Linear's forward leaves in the graph, which is where dAD finds a
// plain Linear layer's input X and output gradient Δ (LinearTaps::attach). The same in LibTorch 1.13
// and 2.x: the weight's leaf (AccumulateGrad) feeds a transpose (TBackward0), under autocast through a
// cast (ToCopyBackward0), into the product's second operand: AddmmBackward0 (2-D input with a bias,
// and 3-D contiguous input flattened to 2-D; X is mat1) or MmBackward0 (no bias, or an input that
// matmul folds to 2-D, a 1-D one included; X is self). The bias reaches the same addmm as its first
// operand, or an AddBackward0 after the mm. A LibTorch that built a Linear layer's product from other
// nodes (a batched bmm, say) would make attach() refuse the layer by name, never tap it wrongly.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/generated/Functions.h>

#include <cstddef>

namespace dtrain::parallel::linear_graph {

using torch::autograd::Node;

// The parameter a leaf of the graph accumulates into; null for any other node.
inline const c10::TensorImpl* leaf_parameter(const Node& node) {
  const auto* leaf = dynamic_cast<const torch::autograd::AccumulateGrad*>(&node);
  return leaf ? leaf->variable.unsafeGetTensorImpl() : nullptr;
}

// A cast passes a parameter through unchanged in value (autocast's copy to bfloat16 or float16).
inline bool is_cast(const Node& node) {
  return dynamic_cast<const torch::autograd::generated::ToCopyBackward0*>(&node) != nullptr;
}

inline bool is_transpose(const Node& node) {
  return dynamic_cast<const torch::autograd::generated::TBackward0*>(&node) != nullptr;
}

// X (rows, in_features) of a Linear layer's matrix product whose input `input` is the transposed
// weight; undefined where `node` is no such product or the weight is another of its operands.
inline torch::Tensor product_input(const Node& node, std::size_t input) {
  using namespace torch::autograd::generated;
  if (const auto* addmm = dynamic_cast<const AddmmBackward0*>(&node))
    return input == 2 ? addmm->mat1_.unpack() : torch::Tensor();
  if (const auto* mm = dynamic_cast<const MmBackward0*>(&node))
    return input == 1 ? mm->self_.unpack() : torch::Tensor();
  return {};
}

// Whether input `input` of `node` is where a Linear layer's forward adds its bias.
inline bool adds_bias(const Node& node, std::size_t input) {
  using namespace torch::autograd::generated;
  if (dynamic_cast<const AddmmBackward0*>(&node)) return input == 0;
  return dynamic_cast<const AddBackward0*>(&node) != nullptr;
}

}  // namespace dtrain::parallel::linear_graph
