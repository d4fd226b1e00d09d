// The memory a run plans for before it starts: the model state its strategy predicts for this rank
// (Strategy::planned_footprint), on top of what the process held before the model was built, against
// what the host has for all of its ranks. A run whose ranks would not fit says so and stops before
// its first step, rather than being killed by the kernel in it.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel {

// This process's resident bytes and the host's MemAvailable, from /proc (0 where unreadable).
struct HostMemory {
  std::uint64_t resident = 0;
  std::uint64_t available = 0;
};
HostMemory read_host_memory();

struct MemoryPlan {
  MemoryFootprint state;           // the strategy's prediction for this rank
  std::uint64_t before_model = 0;  // the process's resident bytes before the model was built
  std::uint64_t available = 0;     // the host's available bytes then
  int ranks_on_host = 1;
  // The process's peak predicted: what it held before the model, and the model state. Activations
  // and communication buffers come on top.
  std::uint64_t peak() const { return before_model + state.total(); }
  // "memory: rank 0 plans 1.02 GB of model state (parameters 400 MB, gradients 200 MB, optimizer state
  // 400 MB), 1.25 GB at peak with the 230 MB the process held before the model; 8 ranks on this host, 20.1
  // GB available"; a strategy whose step holds gradients it frees after also says what stays between
  // steps ("..., 800 MB of it held between steps (... gradients 400 MB of which 200 MB only while a step
  // runs ...)").
  std::string describe(int rank) const;
};

// Throws std::invalid_argument, naming the strategy and the figures, when the ranks on this host
// would need more than it has available for their model state.
void check_fits(const MemoryPlan& plan, const std::string& strategy);

// Before a strategy that keeps the whole model on every rank (one that takes no dp_shard) builds a
// deferred model whole (Note [Deferred initialisation] in models/Network.h): the replica's state
// from the parameters' shapes (as tensor parallelism has cut them) and the optimizer the context
// makes over them, checked by check_fits against the host before anything is allocated. A run
// whose replicas cannot fit is refused here rather than killed while it builds them.
void check_replicas_fit(const StrategyContext& context, const std::string& strategy);

// 1536 -> "1.5 KB", decimal units as the log prints them.
std::string format_bytes(std::uint64_t bytes);

}  // namespace dtrain::parallel
