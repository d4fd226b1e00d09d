// models::Linear: torch::nn::Linear with a tap, the forward hook LibTorch's C++ modules lack.
// Every Linear layer of dtrain's models is one, so a strategy can see each layer's input and, by a
// hook on the output, the gradient that flows back into it: what dAD and rank-dAD share instead
// of the weight gradient (the dAD paper). Its parameters and their names are those of torch::nn::Linear.
// A user's plain torch::nn::Linear is tapped too, through the autograd graph (parallel/dad/LinearTaps.h);
// the tap here is the cheaper route, with no graph to walk each step.
// Its forward can also be replaced (set_forward): how tensor parallelism runs a layer whose weight
// is one rank's shard (parallel/TensorParallel.h), since LibTorch's modules have no forward hooks.
#pragma once

#include <torch/nn/modules/linear.h>

#include <functional>

namespace dtrain::models {

class LinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;

  // Called after every forward with the input (..., in_features) and the output
  // (..., out_features); the output is still in the autograd graph, so the tap may register a
  // hook on it. Null: no tap.
  using Tap = std::function<void(const torch::Tensor& input, const torch::Tensor& output)>;
  void set_tap(Tap tap) { tap_ = std::move(tap); }
  bool tapped() const { return static_cast<bool>(tap_); }

  // Runs in place of torch::nn::Linear's forward when set: input -> output, over this module's
  // weight and bias. Null: the plain forward.
  using Forward = std::function<torch::Tensor(const torch::Tensor& input)>;
  void set_forward(Forward forward) { forward_ = std::move(forward); }
  bool forward_replaced() const { return static_cast<bool>(forward_); }

  torch::Tensor forward(const torch::Tensor& input) {
    auto output = forward_ ? forward_(input) : torch::nn::LinearImpl::forward(input);
    if (tap_) tap_(input, output);
    return output;
  }

 private:
  Tap tap_;
  Forward forward_;
};
TORCH_MODULE(Linear);

}  // namespace dtrain::models
