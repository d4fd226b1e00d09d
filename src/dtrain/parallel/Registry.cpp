// The list behind parallel/Registry.h; the names also go to config/ so that parallel.strategy is
// validated against them.
#include "dtrain/parallel/Registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <stdexcept>

#include "dtrain/config/Schema.h"
#include "dtrain/parallel/MemoryPlan.h"
#include "dtrain/parallel/TensorParallel.h"

namespace dtrain::parallel {
namespace {

struct Strategies {
  std::mutex mutex;
  std::deque<StrategyInfo> list;  // find_strategy returns references into it
};

Strategies& strategies() {
  static Strategies s;
  return s;
}

}  // namespace

bool register_strategy(StrategyInfo info) {
  std::vector<std::string> sections;
  if (!info.options_section.empty()) sections.push_back(info.options_section);
  sections.insert(sections.end(), info.extra_sections.begin(), info.extra_sections.end());
  config::register_choice(config::kStrategyKey, config::Choice{info.name, info.help, info.aliases, sections});
  auto& s = strategies();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.list.push_back(std::move(info));
  return true;
}

std::vector<StrategyInfo> registered_strategies() {
  auto& s = strategies();
  std::lock_guard<std::mutex> lock(s.mutex);
  return {s.list.begin(), s.list.end()};
}

const StrategyInfo* strategy_info(const std::string& name) {
  const auto canonical = config::registered_choices(config::kStrategyKey).resolve(name);
  if (!canonical) return nullptr;
  auto& s = strategies();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& info : s.list) {
    if (info.name == *canonical) return &info;
  }
  return nullptr;
}

const StrategyInfo& find_strategy(const std::string& name) {
  if (const auto* info = strategy_info(name)) return *info;
  throw std::invalid_argument(fmt::format("unknown parallel.strategy '{}'; expected one of {}", name,
                                          config::registered_choices(config::kStrategyKey).list()));
}

std::string strategies_that(const std::function<bool(const StrategyInfo&)>& has) {
  std::vector<std::string> names;
  for (const auto& info : registered_strategies()) {
    if (has(info)) names.push_back(info.name);
  }
  if (names.empty()) return "no strategy";
  std::sort(names.begin(), names.end());
  std::string text = names.front();
  for (std::size_t i = 1; i < names.size(); ++i) text += (i + 1 == names.size() ? " or " : ", ") + names[i];
  return text;
}

bool collectives_on_gpu(config::Device device, const config::ParallelConfig& parallel) {
  if (device != config::Device::Cuda) return false;
  const auto& info = find_strategy(parallel.strategy);
  return !info.host_point_to_point || !info.host_point_to_point(parallel);
}

int data_holders(const config::ParallelConfig& parallel, int world) {
  const auto& info = find_strategy(parallel.strategy);
  resolve_mesh(parallel, world);
  return info.data_holders ? info.data_holders(parallel, world) : world;
}

std::unique_ptr<Strategy> create_strategy(StrategyContext context) {
  const auto& info = find_strategy(context.parallel.strategy);
  if (!context.model)
    throw std::invalid_argument("parallel: the strategy's model is null; build the model first");
  if (!context.make_optimizer || !context.loss) {
    throw std::invalid_argument("parallel: the strategy needs an optimizer factory and a loss");
  }
  if (context.precision == optim::Precision::Fp16 && !info.capabilities.fp16) {
    throw std::invalid_argument(fmt::format(
        "train.precision: fp16: parallel.strategy {} has no loss scale whose skipped steps its ranks agree "
        "on; use train.precision: bf16 or fp32, or one of {}",
        info.name, strategies_that([](const StrategyInfo& other) { return other.capabilities.fp16; })));
  }
  if (info.needs_communicator && !context.comm) {
    throw std::invalid_argument(
        fmt::format("parallel.strategy {} needs a communicator; connect with comm::connect() first, or use "
                    "strategy local",
                    info.name));
  }
  const auto mesh = resolve_mesh(context.parallel, context.comm ? context.comm->size() : 1);
  // After tensor parallelism has cut a deferred model's layers (its shards are what is built).
  auto create = [&info](StrategyContext inner) {
    if (inner.model->deferred() && !info.materializes_stages) {
      const auto& dims = info.mesh.dims;
      if (std::find(dims.begin(), dims.end(), MeshDim::DpShard) == dims.end())
        check_replicas_fit(inner, info.name);
      inner.model->materialize_all();
    }
    return info.create(std::move(inner));
  };
  if (mesh && mesh->tp > 1) return tensor::create_tensor_parallel(std::move(context), *mesh, create);
  return create(std::move(context));
}

}  // namespace dtrain::parallel
