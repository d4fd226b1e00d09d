// See ForeachOptimizers.h. Each step follows LibTorch's own SGD::step, Adam::step and AdamW::step
// (torch/csrc/api/src/optim/{sgd,adam,adamw}.cpp) operation for operation, over lists: the
// per-tensor `grad.add(p, weight_decay)` becomes `_foreach_add(grads, params, weight_decay)`, and so
// on, so the arithmetic, its order and therefore its rounding are LibTorch's.
#include "dtrain/optim/ForeachOptimizers.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "dtrain/optim/FusedKernels.h"
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

// A parameter's Adam state, made as Adam::step makes it on the parameter's first step.
template <class ParamState, class StateMap>
ParamState& adam_state_of(StateMap& state, const torch::Tensor& p) {
  bool created = false;
  auto& s = state_of<ParamState>(state, p, created);
  if (created) {
    s.step(0);
    s.exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
    s.exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
  }
  return s;
}

// Adam and AdamW after their weight-decay term: the moments and the update, as Adam::step has them.
template <class ParamState, class Options, class StateMap>
void adam_update(const Options& options, StateMap& state, const std::vector<torch::Tensor>& params,
                 const std::vector<torch::Tensor>& grads) {
  TORCH_CHECK(!options.amsgrad(), "optimizer: amsgrad is not supported by the multi-tensor update");
  const auto beta1 = std::get<0>(options.betas());
  const auto beta2 = std::get<1>(options.betas());
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
  std::vector<at::Scalar> bias2_sqrt, step_size;
  for (const auto& p : params) {
    auto& s = adam_state_of<ParamState>(state, p);
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

// Writes the device's step counts, where fused steps changed them, into LibTorch's state.
template <class ParamState, class StateMap>
void settle(StateMap& state, const std::vector<torch::optim::OptimizerParamGroup>& groups,
            DeviceStepCounts& counts) {
  const auto changes = counts.take_changes();
  if (changes.empty()) return;
  for (const auto& group : groups) {
    for (const auto& p : group.params()) {
      const auto change = changes.find(p.unsafeGetTensorImpl());
      const auto entry = state.find(state_key(state, p));
      if (change != changes.end() && entry != state.end())
        static_cast<ParamState&>(*entry->second).step(change->second);
    }
  }
}

// Adam's or AdamW's fused step over every group (Note [Step counts on the device]), skipping where
// `found_inf` is 1, at the rate in `lr` where it is defined: `decoupled` picks AdamW's kernel.
// False, having done nothing, where a group's parameters are on a device the kernel does not run
// on, or use amsgrad.
template <class ParamState, class Options, class StateMap>
bool fused_adam_step(std::vector<torch::optim::OptimizerParamGroup>& groups, StateMap& state,
                     DeviceStepCounts& counts, const std::optional<torch::Tensor>& found_inf,
                     const torch::Tensor& lr, bool decoupled) {
#if DTRAIN_HAS_FUSED_ADAM
  struct Group {
    const Options* options;
    Live live;
    std::vector<torch::Tensor> exp_avg, exp_avg_sq, steps;
  };
  std::vector<Group> fused;
  for (auto& group : groups) {
    Group g{&static_cast<const Options&>(group.options()), live_parameters(group), {}, {}, {}};
    if (g.live.params.empty()) continue;
    if (g.options->amsgrad()) return false;
    for (const auto& p : g.live.params) {
      if (!fused_on(FusedKernel::Adam, p.device())) return false;
      if (found_inf && p.device() != found_inf->device()) return false;
    }
    fused.push_back(std::move(g));
  }
  for (auto& g : fused) {
    std::vector<std::int64_t> host_steps;
    for (const auto& p : g.live.params) {
      auto& s = adam_state_of<ParamState>(state, p);
      host_steps.push_back(s.step());
      g.exp_avg.push_back(s.exp_avg());
      g.exp_avg_sq.push_back(s.exp_avg_sq());
    }
    g.steps = counts.of(g.live.params, host_steps);
  }
  for (auto& g : fused) {
    const auto& o = *g.options;
    const auto [beta1, beta2] = o.betas();
    at::_foreach_add_(g.steps, 1);
    // The kernel at a rate of either kind (a double, or a tensor on the device).
    const auto run = [&](const auto& rate) {
      if (decoupled) {
        at::_fused_adamw_(g.live.params, g.live.grads, g.exp_avg, g.exp_avg_sq, /*max_exp_avg_sqs=*/{},
                          g.steps, rate, beta1, beta2, o.weight_decay(), o.eps(), /*amsgrad=*/false,
                          /*maximize=*/false,
                          /*grad_scale=*/{}, found_inf);
      } else {
        at::_fused_adam_(g.live.params, g.live.grads, g.exp_avg, g.exp_avg_sq, /*max_exp_avg_sqs=*/{},
                         g.steps, rate, beta1, beta2, o.weight_decay(), o.eps(), /*amsgrad=*/false,
                         /*maximize=*/false,
                         /*grad_scale=*/{}, found_inf);
      }
    };
#if DTRAIN_HAS_FUSED_TENSOR_LR
    if (lr.defined()) {
      run(lr);
    } else {
      run(o.lr());
    }
#else
    (void)lr;
    run(o.lr());
#endif
    if (found_inf)
      at::_foreach_sub_(g.steps, std::vector<torch::Tensor>(g.steps.size(), found_inf->reshape({})));
  }
  counts.mark_changed();
  if (lr.defined()) counts.mark_replayed();  // a graph's: its replays change the counts unseen
  return true;
#else
  (void)groups, (void)state, (void)counts, (void)found_inf, (void)lr, (void)decoupled;
  return false;
#endif
}

}  // namespace

// Note [Step counts on the device]
// Adam's bias corrections need each parameter's step count, and a step skipped on fp16's overflow
// flag does not count. The flag stays on the device, so only the device knows the count: as
// PyTorch's fused Adam does, each parameter's count is a float32 scalar there (exact to 2^24 steps),
// raised by one before the kernel and lowered by the flag after it, while the kernel itself leaves
// everything untouched where the flag is set. LibTorch's own count (AdamParamState::step, an integer
// on the host, which checkpoints hold) then falls behind; it is brought up to date in one copy of
// every count when something reads it (a checkpoint: save(), or dtrain's named state through
// settle_step_counts()), and the device's counts are dropped, to be made again from the host's, when
// the host's change (a load, or a step of the multi-tensor path). A CUDA graph replays the fused
// step without this code running, so once the rate is a tensor (set_lr_tensor: a graph's) the
// counts are read at every settle rather than only after a step seen here.

std::vector<torch::Tensor> DeviceStepCounts::of(const std::vector<torch::Tensor>& params,
                                                const std::vector<std::int64_t>& host) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& count = counts_[params[i].unsafeGetTensorImpl()];
    if (!count.defined()) {
      count = torch::full({}, static_cast<double>(host[i]),
                          torch::TensorOptions().dtype(torch::kFloat).device(params[i].device()));
    }
    out.push_back(count);
  }
  return out;
}

std::map<const c10::TensorImpl*, std::int64_t> DeviceStepCounts::take_changes() {
  std::map<const c10::TensorImpl*, std::int64_t> out;
  if (!(changed_ || replayed_) || counts_.empty()) return out;
  changed_ = false;
  std::vector<torch::Tensor> values;
  values.reserve(counts_.size());
  for (const auto& entry : counts_) values.push_back(entry.second);
  const auto host = torch::stack(values).to(torch::kCPU, torch::kDouble);
  const auto* read = host.data_ptr<double>();
  std::size_t i = 0;
  for (const auto& entry : counts_) out[entry.first] = std::llround(read[i++]);
  return out;
}

void DeviceStepCounts::clear() {
  counts_.clear();
  changed_ = false;
  replayed_ = false;
}

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
  return fused_step(found_inf);
}

void FusedStep::set_lr_tensor(torch::Tensor lr) {
  TORCH_CHECK(DTRAIN_HAS_FUSED_TENSOR_LR,
              "optimizer: a learning rate on the device needs LibTorch 2.6 or later (the fused steps with a "
              "tensor rate); this one is " TORCH_VERSION);
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
    for (const auto& p : g.live.params) {
      if (!fused_on(FusedKernel::Sgd, p.device())) return false;
      if (found_inf && p.device() != found_inf->device()) return false;
    }
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
#if DTRAIN_HAS_FUSED_TENSOR_LR
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

template <class Base, class ParamState, class Options, bool kDecoupled>
torch::Tensor ForeachAdamLike<Base, ParamState, Options, kDecoupled>::step(
    torch::optim::Optimizer::LossClosure closure) {
  torch::NoGradGuard no_grad;
  auto loss = evaluate(closure);
  if (lr_tensor_.defined() &&
      fused_adam_step<ParamState, Options>(this->param_groups_, this->state_, device_steps_, std::nullopt,
                                           lr_tensor_, kDecoupled)) {
    return loss;
  }
  settle_step_counts();
  forget_step_counts();
  for (auto& group : this->param_groups_) {
    const auto& options = static_cast<const Options&>(group.options());
    auto live = live_parameters(group);
    if (live.params.empty()) continue;
    auto grads = live.grads;
    if (options.weight_decay() != 0) {
      if constexpr (kDecoupled) {
        // AdamW's is decoupled: the weights shrink before the moment update.
        at::_foreach_mul_(live.params, 1 - options.lr() * options.weight_decay());
      } else {
        // Adam's weight decay is an L2 term added to the gradient.
        grads = at::_foreach_add(live.grads, live.params, options.weight_decay());
      }
    }
    adam_update<ParamState>(options, this->state_, live.params, grads);
  }
  return loss;
}

template <class Base, class ParamState, class Options, bool kDecoupled>
bool ForeachAdamLike<Base, ParamState, Options, kDecoupled>::step_unless(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  return fused_adam_step<ParamState, Options>(this->param_groups_, this->state_, device_steps_, found_inf,
                                              lr_tensor_, kDecoupled);
}

// The host's copy of the step counts catches up with the device's; the optimizer's mathematical
// state is unchanged, hence const (and the cast: LibTorch's state_ is not mutable).
template <class Base, class ParamState, class Options, bool kDecoupled>
void ForeachAdamLike<Base, ParamState, Options, kDecoupled>::settle_step_counts() const {
  auto& state = const_cast<ForeachAdamLike*>(this)->state_;
  settle<ParamState>(state, this->param_groups_, device_steps_);
}

template <class Base, class ParamState, class Options, bool kDecoupled>
void ForeachAdamLike<Base, ParamState, Options, kDecoupled>::save(
    torch::serialize::OutputArchive& archive) const {
  settle_step_counts();
  Base::save(archive);
}

template <class Base, class ParamState, class Options, bool kDecoupled>
void ForeachAdamLike<Base, ParamState, Options, kDecoupled>::load(torch::serialize::InputArchive& archive) {
  Base::load(archive);
  forget_step_counts();
}

template class ForeachAdamLike<torch::optim::Adam, torch::optim::AdamParamState, torch::optim::AdamOptions,
                               false>;
template class ForeachAdamLike<torch::optim::AdamW, torch::optim::AdamWParamState, torch::optim::AdamWOptions,
                               true>;

void settle_step_counts(const torch::optim::Optimizer& optimizer) {
  if (const auto* adam = dynamic_cast<const ForeachAdam*>(&optimizer)) adam->settle_step_counts();
  if (const auto* adamw = dynamic_cast<const ForeachAdamW*>(&optimizer)) adamw->settle_step_counts();
}

void forget_step_counts(torch::optim::Optimizer& optimizer) {
  if (auto* adam = dynamic_cast<ForeachAdam*>(&optimizer)) adam->forget_step_counts();
  if (auto* adamw = dynamic_cast<ForeachAdamW*>(&optimizer)) adamw->forget_step_counts();
}

}  // namespace dtrain::optim
