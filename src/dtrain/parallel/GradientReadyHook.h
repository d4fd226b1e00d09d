// GradientReadyHook: a post-hook on a parameter's AccumulateGrad node that runs once the backward
// pass has added that parameter's gradient into grad(); what data_parallel's buckets and zero's
// reduce-scatters launch from while backward still runs.
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace dtrain::parallel {

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
