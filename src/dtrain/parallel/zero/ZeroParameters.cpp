// The zero strategy's parameters: stage 3 gathers each unit before its forward and its backward
// and frees it after (Note [Freeing storage]); stages 1 and 2 all-gather the updated shards after
// the step.
#include <torch/torch.h>

#include <deque>
#include <utility>

#include "dtrain/optim/Autocast.h"
#include "dtrain/parallel/MicroBatches.h"
#include "dtrain/parallel/zero/ZeroStrategy.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {

// ---- stage 3: gathering and freeing parameters ----

void ZeroStrategy::allocate_full(std::size_t u) {
  auto& unit = units_[u];
  unit.full_slot = unit_pool_.take(unit.layout.padded, unit.full.options());
  zero::lend_storage(unit.full, unit.full_slot,
                     static_cast<std::size_t>(unit.layout.padded) * unit.full.element_size());
}

void ZeroStrategy::free_full(std::size_t u) {
  auto& unit = units_[u];
  if (zero::storage_allocated(unit.full)) zero::free_storage(unit.full);
  unit_pool_.give(unit.full_slot);
  unit.full_slot = torch::Tensor();
}

void ZeroStrategy::launch_gather(std::size_t u) {
  auto& unit = units_[u];
  if (unit.gather || zero::storage_allocated(unit.full)) return;
  allocate_full(u);
  // The shard is storage of its own and nothing writes it while the gather runs.
  unit.gather = shard_->allgather(unit.shard.detach(), unit.full, /*async_op=*/true);
}

void ZeroStrategy::wait_gather(std::size_t u, double* communication_seconds) {
  auto& unit = units_[u];
  if (!unit.gather && zero::storage_allocated(unit.full)) return;
  launch_gather(u);
  const auto start = util::Clock::now();
  unit.gather->wait();
  unit.gather.reset();
  if (communication_seconds) *communication_seconds += util::seconds_since(start);
  // fp16 trains with the weights rounded to 16 bits; the shard stays the float32 master, and
  // evaluation and checkpoints see the master values.
  if (precision_.scaling() && in_step_ && !unit.full.is_cuda()) {
    torch::NoGradGuard no_grad;
    unit.full.copy_(round_through_half(unit.full));
  }
}

void ZeroStrategy::release(std::size_t u) {
  if (!sharded_parameters() || evaluating_) return;
  auto& unit = units_[u];
  if (unit.gather) {
    unit.gather->wait();
    unit.gather.reset();
  }
  free_full(u);
}

void ZeroStrategy::gather_all(double* communication_seconds) {
  if (!sharded_parameters()) return;
  for (std::size_t u = 0; u < units_.size(); ++u) launch_gather(u);
  for (std::size_t u = 0; u < units_.size(); ++u) wait_gather(u, communication_seconds);
}

void ZeroStrategy::release_all() {
  for (std::size_t u = 0; u < units_.size(); ++u) release(u);
}

torch::Tensor ZeroStrategy::forward_sharded(const torch::Tensor& inputs) {
  auto& model = *context_.model;
  // The CPU's fp16 emulation rounds between stages; a GPU autocasts to float16 instead.
  const bool gpu = inputs.is_cuda();
  const bool fp16 = precision_.scaling() && !gpu;
  const bool training = torch::GradMode::is_enabled();
  auto run = [&]() -> torch::Tensor {
    auto x = inputs;
    x = model.in_memory_order(x);
    auto stages = model.stages();
    for (std::size_t s = 0; s < stages.size(); ++s) {
      const int u = unit_of_stage_[s];
      for (const auto borrowed : borrowed_[s]) wait_gather(borrowed);
      if (u >= 0) {
        wait_gather(static_cast<std::size_t>(u));
        if (options_.prefetch && static_cast<std::size_t>(u) + 1 < units_.size()) launch_gather(u + 1);
      }
      x = stages[s].forward(fp16 ? round_through_half(x) : x);
      if (u < 0) continue;
      if (training && x.requires_grad()) {
        const auto unit = static_cast<std::size_t>(u);
        x.register_hook([this, unit](const torch::Tensor&) { pre_backward(unit); });
      }
      // The last unit's backward comes right after its forward: it stays. A unit another stage
      // borrows stays until its own backward (Note [Tied parameters under zero]).
      const bool stays = training && (static_cast<std::size_t>(u) + 1 == units_.size() || lent_[u]);
      if (!stays) release(static_cast<std::size_t>(u));
    }
    return fp16 ? round_through_half(x) : x;
  };
  const auto precision = precision_.precision();
  const bool autocast_fp16 = precision == optim::Precision::Fp16 && gpu;
  if (precision != optim::Precision::Bf16 && !autocast_fp16) return run();
  torch::Tensor outputs;
  {
    optim::AutocastGuard autocast(true, autocast_fp16 ? torch::kHalf : torch::kBFloat16,
                                  inputs.device().type());
    outputs = run();
  }
  return torch::isFloatingType(outputs.scalar_type()) ? outputs.to(torch::kFloat) : outputs;
}

void ZeroStrategy::pre_backward(std::size_t u) {
  if (!sharded_parameters()) return;
  wait_gather(u);
  if (options_.prefetch && u > 0) launch_gather(u - 1);
}

// Stages 1 and 2: every rank's updated shard into every rank's whole parameters. The shard is part
// of the all-gather's output, so each unit sends a copy of it; at most two units are in flight, so
// the copies hold two units' shards, not the whole of this rank's.
double ZeroStrategy::gather_after_step() {
  torch::NoGradGuard no_grad;
  std::deque<std::pair<std::size_t, torch::Tensor>> in_flight;  // unit, the copy it sends
  double waited = 0;
  auto retire = [&] {
    const auto start = util::Clock::now();
    auto& unit = units_[in_flight.front().first];
    unit.gather->wait();
    unit.gather.reset();
    waited += util::seconds_since(start);
    shard_pool_.give(in_flight.front().second);
    in_flight.pop_front();
  };
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (in_flight.size() >= 2) retire();
    auto input = shard_pool_.take(units_[u].layout.shard, units_[u].shard.options());
    input.copy_(units_[u].shard.detach());
    units_[u].gather = shard_->allgather(input, units_[u].full, /*async_op=*/true);
    in_flight.emplace_back(u, std::move(input));
  }
  while (!in_flight.empty()) retire();
  return waited;
}

}  // namespace dtrain::parallel
