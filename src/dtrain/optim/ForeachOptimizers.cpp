// See ForeachOptimizers.h. Each step follows LibTorch's own SGD::step, Adam::step and AdamW::step
// (torch/csrc/api/src/optim/{sgd,adam,adamw}.cpp) operation for operation, over lists: the
// per-tensor `grad.add(p, weight_decay)` becomes `_foreach_add(grads, params, weight_decay)`, and so
// on, so the arithmetic, its order and therefore its rounding are LibTorch's.
#include "dtrain/optim/ForeachOptimizers.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "dtrain/optim/FusedSgd.h"
#include "dtrain/optim/StateKey.h"

namespace dtrain::optim {
namespace {

// A step's closure, evaluated with gradients enabled as LibTorch's optimizers do.
torch::Tensor evaluate(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

// The group's parameters that have a gradient, and the gradients.
struct Live {
  std::vector<torch::Tensor> params, grads;
};

Live live_parameters(torch::optim::OptimizerParamGroup& group) {
  Live live;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    TORCH_CHECK(!p.grad().is_sparse(), "optimizer: sparse gradients are not supported");
    live.params.push_back(p);
    live.grads.push_back(p.grad());
  }
  return live;
}

template <class ParamState, class StateMap>
ParamState& state_of(StateMap& state, const torch::Tensor& p, bool& created) {
  auto key = state_key(state, p);
  auto it = state.find(key);
  created = it == state.end();
  if (created) it = state.emplace(std::move(key), std::make_unique<ParamState>()).first;
  return static_cast<ParamState&>(*it->second);
}

// Adam and AdamW after their weight-decay term: the moments and the update, as Adam::step has them.
template <class Options, class StateMap>
void adam_update(const Options& options, StateMap& state, const std::vector<torch::Tensor>& params,
                 const std::vector<torch::Tensor>& grads) {
  TORCH_CHECK(!options.amsgrad(), "optimizer: amsgrad is not supported by the multi-tensor update");
  const auto beta1 = std::get<0>(options.betas());
  const auto beta2 = std::get<1>(options.betas());
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  std::vector<at::Scalar> bias2_sqrt, step_size;
  for (const auto& p : params) {
    bool created = false;
    auto& s = state_of<torch::optim::AdamParamState>(state, p, created);
    if (created) {
      s.step(0);
      s.exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
      s.exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
    }
    s.step(s.step() + 1);
    const auto step = static_cast<double>(s.step());
    bias2_sqrt.emplace_back(std::sqrt(1 - std::pow(beta2, step)));
    step_size.emplace_back(-options.lr() / (1 - std::pow(beta1, step)));
    exp_avg.push_back(s.exp_avg());
    exp_avg_sq.push_back(s.exp_avg_sq());
  }
  at::_foreach_mul_(exp_avg, beta1);
  at::_foreach_add_(exp_avg, grads, 1 - beta1);
  at::_foreach_mul_(exp_avg_sq, beta2);
  at::_foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2);
  auto denom = at::_foreach_sqrt(exp_avg_sq);
  at::_foreach_div_(denom, bias2_sqrt);
  at::_foreach_add_(denom, options.eps());
  at::_foreach_addcdiv_(params, exp_avg, denom, step_size);
}

}  // namespace

torch::Tensor ForeachSGD::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  auto loss = evaluate(closure);
  if (lr_tensor_.defined() && fused_step(std::nullopt)) return loss;
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
    auto live = live_parameters(group);
    if (live.params.empty()) continue;
    auto d_p = options.weight_decay() != 0 ? at::_foreach_add(live.grads, live.params, options.weight_decay())
                                           : live.grads;
    if (options.momentum() != 0) {
      // A parameter's first step starts its buffer at that step's gradient (SGD::step's clone);
      // the others decay theirs and add it, in one operation over the list.
      std::vector<torch::Tensor> all_buffers, buffers, buffers_d_p;
      for (std::size_t i = 0; i < live.params.size(); ++i) {
        bool created = false;
        auto& s = state_of<torch::optim::SGDParamState>(state_, live.params[i], created);
        if (created) {
          s.momentum_buffer(torch::clone(d_p[i]).detach());
        } else {
          buffers.push_back(s.momentum_buffer());
          buffers_d_p.push_back(d_p[i]);
        }
        all_buffers.push_back(s.momentum_buffer());
      }
      if (!buffers.empty()) {
        at::_foreach_mul_(buffers, options.momentum());
        at::_foreach_add_(buffers, buffers_d_p, 1 - options.dampening());
      }
      d_p = options.nesterov() ? at::_foreach_add(d_p, all_buffers, options.momentum()) : all_buffers;
    }
    at::_foreach_add_(live.params, d_p, -options.lr());
  }
  return loss;
}

bool ForeachSGD::step_unless(const torch::Tensor& found_inf) {
  return found_inf.is_cuda() && fused_step(found_inf);
}

void ForeachSGD::set_lr_tensor(torch::Tensor lr) {
  TORCH_CHECK(
      DTRAIN_HAS_FUSED_SGD_TENSOR_LR,
      "optimizer: a learning rate on the device needs LibTorch 2.6 or later (at::_fused_sgd_ with a tensor "
      "rate); this one is " TORCH_VERSION);
  lr_tensor_ = std::move(lr);
}

bool ForeachSGD::fused_step(const std::optional<torch::Tensor>& found_inf) {
#if DTRAIN_HAS_FUSED_SGD
  torch::NoGradGuard no_grad;
  struct Group {
    const torch::optim::SGDOptions* options;
    Live live;
    std::vector<torch::Tensor> buffers;
  };
  std::vector<Group> groups;
  for (auto& group : param_groups_) {
    Group g{&static_cast<const torch::optim::SGDOptions&>(group.options()), live_parameters(group), {}};
    if (g.live.params.empty()) continue;
    if (g.options->momentum() != 0) {
      for (const auto& p : g.live.params) {
        const auto it = state_.find(state_key(state_, p));
        if (it == state_.end()) return false;  // a first step: step() starts the buffer
        g.buffers.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
      }
    }
    groups.push_back(std::move(g));
  }
  for (auto& g : groups) {
    const auto& o = *g.options;
#if DTRAIN_HAS_FUSED_SGD_TENSOR_LR
    if (lr_tensor_.defined()) {
      at::_fused_sgd_(g.live.params, g.live.grads, g.buffers, o.weight_decay(), o.momentum(), lr_tensor_,
                      o.dampening(), o.nesterov(), /*maximize=*/false, /*is_first_step=*/false,
                      /*grad_scale=*/{}, found_inf);
      continue;
    }
#endif
    at::_fused_sgd_(g.live.params, g.live.grads, g.buffers, o.weight_decay(), o.momentum(), o.lr(),
                    o.dampening(), o.nesterov(), /*maximize=*/false, /*is_first_step=*/false,
                    /*grad_scale=*/{}, found_inf);
  }
  return true;
#else
  (void)found_inf;
  return false;
#endif
}

torch::Tensor ForeachAdam::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  auto loss = evaluate(closure);
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamOptions&>(group.options());
    auto live = live_parameters(group);
    if (live.params.empty()) continue;
    // Adam's weight decay is an L2 term added to the gradient.
    const auto grads = options.weight_decay() != 0
                           ? at::_foreach_add(live.grads, live.params, options.weight_decay())
                           : live.grads;
    adam_update(options, state_, live.params, grads);
  }
  return loss;
}

torch::Tensor ForeachAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  auto loss = evaluate(closure);
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    auto live = live_parameters(group);
    if (live.params.empty()) continue;
    // AdamW's is decoupled: the weights shrink before the moment update.
    if (options.weight_decay() != 0)
      at::_foreach_mul_(live.params, 1 - options.lr() * options.weight_decay());
    adam_update(options, state_, live.params, live.grads);
  }
  return loss;
}

}  // namespace dtrain::optim
