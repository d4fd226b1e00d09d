// GradientReadyHook: a post-hook on a parameter's AccumulateGrad node that runs once the backward
// pass has added that parameter's gradient into grad(); what data_parallel's buckets and zero's
// reduce-scatters launch from while backward still runs.
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <utility>

namespace dtrain::parallel {

// What holds a parameter's AccumulateGrad node: std::shared_ptr<Node> in LibTorch 1.13 to 2.x,
// c10::intrusive_ptr<Node> in later 2.x (2.14), whichever grad_accumulator() returns.
using AccumulatorPtr =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::autograd::Variable&>()));

struct GradientReadyHook final : torch::autograd::FunctionPostHook {
  explicit GradientReadyHook(std::function<void()> on_ready) : on_ready(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    on_ready();
    return outputs;
  }
  std::function<void()> on_ready;
};

}  // namespace dtrain::parallel
