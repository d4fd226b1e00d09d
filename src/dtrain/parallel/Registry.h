// The strategy registry: a strategy is one folder under parallel/ whose files register it by
// name with DTRAIN_REGISTER_STRATEGY, together with its option section (parallel.<name>.*) and a
// line of help. The names parallel.strategy accepts, the configuration section, the factory and
// `dtrain train --help` all come from here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/parallel/Mesh.h"
#include "dtrain/parallel/Strategy.h"

namespace dtrain::parallel {

// What an elastic job (`dtrain launch --nnodes MIN:MAX`) can do with a strategy when its members
// come and go (Note [Elastic workers] in run/ElasticWorker.h).
enum class Elasticity {
  Fixed,         // cannot change size while it runs; StrategyCapabilities::fixed_because says why
  WholeState,    // every member holds the whole training state: after a failure a survivor hands it on
  ShardedState,  // members hold shards: after a failure the next generation starts from the latest checkpoint
};

// What a strategy can do, declared once where it registers. The checks outside parallel/
// (elastic jobs, train.cuda_graph, reports) and the tests that sweep strategies read these, not
// lists of names. Each field starts at "cannot"; a registration sets what its strategy does.
struct StrategyCapabilities {
  Elasticity elastic = Elasticity::Fixed;
  // With Elasticity::Fixed: why, one line naming what a member holds ("each member holds its own
  // graph nodes").
  std::string fixed_because = "its registration does not declare that it can";
  // train.cuda_graph: its whole step is GPU work that a captured graph can replay (no communication
  // through dtrain's communicator, whose host-side work a replay would skip).
  bool cuda_graph = false;
  // train.precision: fp16, a loss scale whose skipped steps every rank agrees on; create_strategy
  // refuses fp16 for a strategy that does not declare it.
  bool fp16 = false;
  // optim.name: lbfgs, its closure evaluated as often on every rank as in one process, see
  // Note [Distributed L-BFGS]. A strategy without it refuses lbfgs itself, where it sees the optimizer.
  bool lbfgs = false;
  // Its all-reduce travels as parallel.<options_section>.compression says (none, fp16, bf16, or
  // powersgd with powersgd_rank); a report sets that wire beside the precision.
  bool wire_compression = false;
};

struct StrategyInfo {
  std::string name;  // parallel.strategy's value, the folder's name, the option section's name
  std::string help;  // one line for --help
  // Computes the mathematics of one process (correctness is exactness, docs/ARCHITECTURE.md): the
  // parameterised equivalence test (tests/parallel/StrategyEquivalenceTest.cpp) must have a row for it.
  bool exact = true;
  // Refuses to run without a communicator (a world of one still communicates nothing).
  bool needs_communicator = true;
  std::function<std::unique_ptr<Strategy>(StrategyContext)> create;
  // The option section it reads, parallel.<options_section>.*: its own when it registers one, or
  // another strategy's (rankdad reads dad's); empty for none.
  std::string options_section{};
  // Other names it answers to (the dAD paper's "dsgd" for data_parallel).
  std::vector<std::string> aliases{};
  // Option sections beside its own that apply when it is chosen (decentralized: parallel.graph).
  std::vector<std::string> extra_sections{};
  // How many data holders the training set is partitioned over, for `world` ranks: null = one per
  // rank; decentralized strategies: one per graph node. Throws std::invalid_argument when the
  // holders cannot be spread evenly over the ranks.
  std::function<int(const config::ParallelConfig&, int world)> data_holders{};
  // Whether, with the options of `parallel`, it exchanges point-to-point messages that NCCL, which
  // matches them by their order and not their tag, cannot carry: pipeline's, tagged and received
  // ahead of need; asynchronous gossip's, receives left posted from one step to the next. It then
  // refuses nccl, and on a GPU parallel.backend: auto picks a host transport (collectives_on_gpu).
  // Null: never (synchronous gossip posts each round as one batch, which NCCL groups).
  std::function<bool(const config::ParallelConfig&)> host_point_to_point{};
  StrategyCapabilities capabilities{};
  // The parallel.mesh dimensions it takes, and the mesh it runs without one (Note [The device mesh]).
  MeshUse mesh{};
  // Builds the stages it keeps of a deferred model itself (pipeline: its stage's); create_strategy
  // materializes the whole of a deferred model for any other (Note [Deferred initialisation] in
  // models/Network.h).
  bool materializes_stages = false;
};

// Registers a strategy without options of its own; returns true, for a static initialiser.
bool register_strategy(StrategyInfo info);

// Registers a strategy and its option section parallel.<info.name>.*: `Options` with its defaults,
// described by `describe` (see config/Options.h). The strategy reads it from
// context.parallel.options.get<Options>(info.name).
template <class Options>
bool register_strategy(StrategyInfo info, Options defaults,
                       void (*describe)(config::OptionVisitor&, Options&)) {
  config::register_section("parallel", info.name, std::move(defaults), describe);
  info.options_section = info.name;
  return register_strategy(std::move(info));
}

// Every registered strategy, in registration order.
std::vector<StrategyInfo> registered_strategies();
// Throws std::invalid_argument listing the registered names when `name` is none of them.
const StrategyInfo& find_strategy(const std::string& name);
// The registered strategy `name` (case-insensitive, or an alias) names, or null when none does:
// for names read back from a run of another build (results.json).
const StrategyInfo* strategy_info(const std::string& name);
// The names of the registered strategies `has` holds for, sorted, as a message says them:
// "data_parallel or zero", "a, b or c"; "no strategy" when there is none.
std::string strategies_that(const std::function<bool(const StrategyInfo&)>& has);

// Whether a job on `device` (train.device) running parallel.strategy hands its communicator CUDA
// tensors for NCCL, where built (comm::BackendLayout::cuda): on a GPU, unless the strategy exchanges
// point-to-point messages NCCL cannot carry with these options (StrategyInfo::host_point_to_point);
// those cross through host memory over gloo or mpi.
bool collectives_on_gpu(config::Device device, const config::ParallelConfig& parallel);

// The data holders of parallel.strategy for `world` ranks (StrategyInfo::data_holders), after
// checking parallel.mesh against them (resolve_mesh).
int data_holders(const config::ParallelConfig& parallel, int world);

// Builds context.parallel.strategy (case-insensitive). Collective for strategies that communicate.
// Throws std::invalid_argument for an unknown strategy or options it cannot honour, parallel.mesh
// included.
std::unique_ptr<Strategy> create_strategy(StrategyContext context);

// Registers a strategy from its folder parallel/<folder>/ (the folder's name is the anchor that
// keeps the file linked in; see Note [Link anchors] in config/Registry.h):
//   DTRAIN_REGISTER_STRATEGY(local, StrategyInfo{"local", "one process, no communication", ...});
#define DTRAIN_REGISTER_STRATEGY(folder, ...)     \
  extern "C" const bool dtrain_strategy_##folder; \
  extern "C" const bool dtrain_strategy_##folder = ::dtrain::parallel::register_strategy(__VA_ARGS__)

}  // namespace dtrain::parallel
