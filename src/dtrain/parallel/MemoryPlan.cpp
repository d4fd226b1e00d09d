// See MemoryPlan.h.
#include "dtrain/parallel/MemoryPlan.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "dtrain/optim/OptimizerState.h"

namespace dtrain::parallel {

HostMemory read_host_memory() {
  HostMemory memory;
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (statm >> size >> resident)
    memory.resident = resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") memory.available = kib * 1024;
  }
  return memory;
}

void check_replicas_fit(const StrategyContext& context, const std::string& strategy) {
  MemoryPlan plan;
  std::vector<torch::Tensor> trainable;
  for (const auto& p : context.model->parameters()) {
    const std::uint64_t bytes = p.numel() * p.element_size();  // shapes: the storage is not there yet
    plan.state.parameters += bytes;
    if (!p.requires_grad()) continue;
    plan.state.gradients += bytes;
    trainable.push_back(p);
  }
  if (!trainable.empty())
    plan.state.optimizer_state = optim::planned_optimizer_state_bytes(*context.make_optimizer(trainable));
  plan.available = read_host_memory().available;
  plan.ranks_on_host = std::max(1, context.local_world_size);
  check_fits(plan, strategy);
}

std::string format_bytes(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.0f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} KB", b / 1e3);
  return fmt::format("{} B", bytes);
}

std::string MemoryPlan::describe(int rank) const {
  // A sharded strategy's step holds whole gradients only while it runs: both figures are said, the
  // state kept between steps (ZeRO's accounting) and the step's.
  const auto gradients = state.step_gradients == 0
                             ? format_bytes(state.gradients)
                             : fmt::format("{} of which {} only while a step runs",
                                           format_bytes(state.gradients), format_bytes(state.step_gradients));
  const auto held = state.step_gradients == 0
                        ? std::string()
                        : fmt::format(", {} of it held between steps", format_bytes(state.held()));
  return fmt::format(
      "memory: rank {} plans {} of model state{} (parameters {}, gradients {}, optimizer state {}), {} "
      "at peak with the {} the process held before the model; {} rank(s) on this host, {} available",
      rank, format_bytes(state.total()), held, format_bytes(state.parameters), gradients,
      format_bytes(state.optimizer_state), format_bytes(peak()), format_bytes(before_model), ranks_on_host,
      format_bytes(available));
}

void check_fits(const MemoryPlan& plan, const std::string& strategy) {
  if (plan.state.total() == 0 || plan.available == 0) return;
  const auto needed = plan.state.total() * static_cast<std::uint64_t>(plan.ranks_on_host);
  if (needed <= plan.available) return;
  throw std::invalid_argument(fmt::format(
      "memory: parallel.strategy {} holds {} of model state a rank (parameters {}, gradients {}, optimizer "
      "state {}), and the {} rank(s) on this host need {} where {} is available; shard the state "
      "(parallel.mesh.dp_shard, parallel.mesh.tp, parallel.mesh.pp) or start fewer ranks on a host",
      strategy, format_bytes(plan.state.total()), format_bytes(plan.state.parameters),
      format_bytes(plan.state.gradients), format_bytes(plan.state.optimizer_state), plan.ranks_on_host,
      format_bytes(needed), format_bytes(plan.available)));
}

}  // namespace dtrain::parallel
