// The zero strategy's gradients: stages 2 and 3 reduce-scatter each unit as soon as autograd has
// filled its flat gradient buffer (Note [Gradient buffers]); stage 1 reduce-scatters the whole
// gradients once backward is done.
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <deque>
#include <functional>
#include <utility>

#include "dtrain/parallel/GradientReadyHook.h"
#include "dtrain/parallel/zero/ZeroStrategy.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

namespace {

// A pre-hook on a parameter's AccumulateGrad node: runs before autograd adds the gradient in.
struct GradientArrivingHook final : torch::autograd::FunctionPreHook {
  explicit GradientArrivingHook(std::function<void()> on_arrival) : on_arrival(std::move(on_arrival)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    on_arrival();
    return grads;
  }
  std::function<void()> on_arrival;
};

}  // namespace

void ZeroStrategy::install_hooks() {
  for (std::size_t u = 0; u < units_.size(); ++u) {
    auto& unit = units_[u];
    for (const auto& p : unit.layout.params) {
      // The variable holds its accumulator weakly: holding it here keeps the hook alive.
      auto accumulator = torch::autograd::impl::grad_accumulator(p.param);
      TORCH_INTERNAL_ASSERT(accumulator, "parameter '", p.name, "' has no gradient accumulator");
      unit.hook_keys.push_back(accumulator->add_post_hook(
          std::make_unique<GradientReadyHook>([this, u] { on_gradient_ready(u); })));
      auto pre_hook = std::make_unique<GradientArrivingHook>([this, u] { before_gradient(u); });
      unit.pre_hooks.push_back(pre_hook.get());
      accumulator->add_pre_hook(std::move(pre_hook));
      unit.accumulators.push_back(std::move(accumulator));
    }
    unit.pending = static_cast<int>(unit.layout.params.size());
  }
}

void ZeroStrategy::remove_hooks() {
  for (auto& unit : units_) {
    for (std::size_t i = 0; i < unit.accumulators.size(); ++i) {
      unit.accumulators[i]->del_post_hook(unit.hook_keys[i]);
      // Node has no del_pre_hook in LibTorch 1.13: erase ours by identity.
      auto& pre_hooks = unit.accumulators[i]->pre_hooks();
      for (auto it = pre_hooks.begin(); it != pre_hooks.end(); ++it) {
        if (it->get() == unit.pre_hooks[i]) {
          pre_hooks.erase(it);
          break;
        }
      }
    }
    unit.accumulators.clear();
    unit.hook_keys.clear();
    unit.pre_hooks.clear();
  }
}

void ZeroStrategy::wait_outstanding_quietly() {
  for (auto& unit : units_) {
    for (auto* work : {&unit.gather, &unit.reduce}) {
      if (!*work) continue;
      try {
        (*work)->wait();
      } catch (const std::exception&) {
        // Already failed; the buffers only need to outlive the backend's use of them.
      }
      work->reset();
    }
  }
  in_flight_.clear();
}

// ---- stages 2 and 3: gradients reduce-scattered during backward ----

void ZeroStrategy::on_gradient_ready(std::size_t u) {
  auto& unit = units_[u];
  TORCH_INTERNAL_ASSERT(unit.pending > 0, "zero: a unit's gradients completed twice in one backward");
  if (--unit.pending == 0) launch_ready_reductions();
}

void ZeroStrategy::launch_ready_reductions() {
  // Backward completes units last to first; each rank launches them in that order only.
  while (next_reduction_ < units_.size()) {
    const std::size_t u = units_.size() - 1 - next_reduction_;
    if (units_[u].pending > 0) return;
    launch_reduction(u);
    ++next_reduction_;
  }
}

void ZeroStrategy::before_gradient(std::size_t u) {
  auto& unit = units_[u];
  if (unit.full_grad.defined()) return;  // already filling (or reducing: nothing more arrives)
  // See Note [Gradient buffers]: room for this unit's buffer first.
  while (!in_flight_.empty() && in_flight_.size() + filling_ + 1 > kGradientBuffers) retire_reduction();
  torch::NoGradGuard no_grad;
  // Zeros: AccumulateGrad adds into it, and the padding is sent as zeros.
  unit.full_grad = gradient_pool_.take(unit.layout.padded, unit.shard.options());
  unit.full_grad.zero_();
  for (const auto& p : unit.layout.params) {
    auto param = p.param;
    param.mutable_grad() = zero::alias(unit.full_grad, p.offset, p.param.sizes());
  }
  ++filling_;
}

void ZeroStrategy::launch_reduction(std::size_t u) {
  auto& unit = units_[u];
  before_gradient(u);  // a unit no gradient reached on this rank (unused in this forward): zeros
  torch::NoGradGuard no_grad;
  auto flat = unit.full_grad;
  for (const auto& p : unit.layout.params) {
    auto param = p.param;
    auto& grad = param.mutable_grad();
    // AccumulateGrad adds into the view in place; should it ever have replaced the tensor instead
    // (a layout it cannot add into), the values are copied into place.
    const auto* slot = static_cast<const char*>(flat.data_ptr()) + p.offset * flat.element_size();
    if (grad.defined() && grad.data_ptr() != slot) {
      flat.narrow(0, p.offset, p.numel).copy_(grad.reshape({-1}));
    }
    grad = torch::Tensor();
  }
  --filling_;
  release(u);
  // Dividing before the sum, as data_parallel's buckets do; by every rank, replicas included (Note [HSDP]).
  if (ranks_ > 1) flat.div_(ranks_);
  // The step's first backward writes the shard's gradient (zero until now) itself; a later
  // micro-batch's is added to it.
  torch::Tensor output = unit.shard.mutable_grad();
  if (!first_backward_) {
    unit.received = shard_pool_.take(unit.layout.shard, flat.options());
    output = unit.received;
  }
  unit.reduce = shard_->reduce_scatter(flat, output, comm::ReduceOp::Sum, /*async_op=*/true);
  unit.launched = true;
  in_flight_.push_back(u);
}

void ZeroStrategy::retire_reduction() {
  torch::NoGradGuard no_grad;
  auto& unit = units_[in_flight_.front()];
  in_flight_.pop_front();
  unit.reduce->wait();
  unit.reduce.reset();
  if (unit.received.defined()) {
    unit.shard.mutable_grad().add_(unit.received);
    shard_pool_.give(unit.received);
    unit.received = torch::Tensor();
  }
  gradient_pool_.give(unit.full_grad);
  unit.full_grad = torch::Tensor();
}

double ZeroStrategy::finish_backward(bool last) {
  overlapped_ = 0;
  for (const auto& unit : units_) overlapped_ += unit.launched ? 1 : 0;
  // Units that got no gradient on this rank (unused in this forward) still take part, as zeros.
  for (auto& unit : units_) unit.pending = 0;
  launch_ready_reductions();
  const auto start = util::Clock::now();
  while (!in_flight_.empty()) retire_reduction();
  for (auto& unit : units_) {
    unit.launched = false;
    unit.pending = static_cast<int>(unit.layout.params.size());
  }
  TORCH_INTERNAL_ASSERT(filling_ == 0, "zero: a unit's gradient buffer outlived its backward");
  next_reduction_ = 0;
  first_backward_ = false;
  const double waited = util::seconds_since(start);
  // Between micro-batches the next one's forward has already gathered its last unit for backward.
  if (last) release_all();
  return waited;
}

// ---- stage 1: whole gradients, reduced once per step ----

// The shard's gradient is part of the reduce-scatter's input (the whole gradient), so each unit
// reduces into a pooled buffer and copies it over; at most two units are in flight.
double ZeroStrategy::reduce_scatter_step_gradients() {
  torch::NoGradGuard no_grad;
  std::deque<std::size_t> in_flight;
  double waited = 0;
  auto retire = [&] {
    const auto start = util::Clock::now();
    auto& unit = units_[in_flight.front()];
    in_flight.pop_front();
    unit.reduce->wait();
    unit.reduce.reset();
    waited += util::seconds_since(start);
    unit.shard.mutable_grad().copy_(unit.received);
    shard_pool_.give(unit.received);
    unit.received = torch::Tensor();
  };
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (in_flight.size() >= 2) retire();
    auto& unit = units_[u];
    if (ranks_ > 1) unit.full_grad.div_(ranks_);
    unit.received = shard_pool_.take(unit.layout.shard, unit.full_grad.options());
    unit.reduce =
        shard_->reduce_scatter(unit.full_grad, unit.received, comm::ReduceOp::Sum, /*async_op=*/true);
    in_flight.push_back(u);
  }
  while (!in_flight.empty()) retire();
  return waited;
}

// ---- HSDP: the shards' gradients across replicas ----

// Every unit's all-reduce is launched before the first is waited for; each sums the shard's gradient
// of the R ranks holding that shard, already divided by every rank's count (Note [HSDP]).
double ZeroStrategy::allreduce_across_replicas() {
  if (!replicate_) return 0.0;
  std::vector<comm::WorkPtr> works;
  for (auto& unit : units_)
    works.push_back(replicate_->allreduce(unit.shard.mutable_grad(), comm::ReduceOp::Sum,
                                          /*async_op=*/true));
  const auto start = util::Clock::now();
  for (auto& work : works) work->wait();
  return util::seconds_since(start);
}

}  // namespace dtrain::parallel
