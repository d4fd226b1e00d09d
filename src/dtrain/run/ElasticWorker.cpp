// See ElasticWorker.h, Note [Elastic workers].
#include "dtrain/run/ElasticWorker.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "dtrain/config/ValueText.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/train/Trainer.h"
#include "dtrain/util/Clock.h"

namespace dtrain::run {
namespace {

std::string variable(const comm::Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

int positive(const std::string& text, const std::string& what) {
  const auto value = config::detail::parse_int(text);
  if (!value || *value < 1 || *value > std::numeric_limits<int>::max()) {
    throw std::invalid_argument(fmt::format("{}: expected a positive whole number, found '{}'", what, text));
  }
  return static_cast<int>(*value);
}

}  // namespace

std::optional<comm::ElasticOptions> elastic_options(const comm::Environment& env) {
  const auto spec = variable(env, kElasticVariable);
  if (spec.empty()) return std::nullopt;
  const auto colon = spec.find(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument(fmt::format("{}={}: expected MIN:MAX members", kElasticVariable, spec));
  }
  comm::ElasticOptions options;
  options.min_members = positive(spec.substr(0, colon), kElasticVariable);
  options.max_members = positive(spec.substr(colon + 1), kElasticVariable);
  if (options.max_members < options.min_members) {
    throw std::invalid_argument(fmt::format("{}={}: MIN is above MAX", kElasticVariable, spec));
  }
  if (const auto ms = variable(env, kElasticLastCallVariable); !ms.empty()) {
    options.last_call = std::chrono::milliseconds(positive(ms, kElasticLastCallVariable));
  }
  if (const auto run = variable(env, "TORCHELASTIC_RUN_ID"); !run.empty()) options.run_id = run;
  return options;
}

std::string elastic_member_id(const comm::Environment& env) {
  const auto id = variable(env, kElasticIdVariable);
  if (id.empty())
    throw std::invalid_argument(
        fmt::format("{} is not set: an elastic worker needs an id", kElasticIdVariable));
  return id;
}

bool holds_whole_state(const config::RunConfig& cfg) {
  return parallel::find_strategy(cfg.parallel.strategy).capabilities.elastic ==
         parallel::Elasticity::WholeState;
}

void check_elastic(const config::RunConfig& cfg) {
  const auto& s = cfg.parallel.strategy;
  const auto& can = parallel::find_strategy(s).capabilities;
  if (parallel::mesh_set(cfg.parallel.mesh)) {
    const auto& m = cfg.parallel.mesh;
    throw std::invalid_argument(fmt::format(
        "dtrain launch --nnodes MIN:MAX: parallel.mesh (pp {}, dp_replicate {}, dp_shard {}, tp {}; 0 = "
        "not set) fixes "
        "the number of workers, which an elastic job changes; leave parallel.mesh out, or give a "
        "fixed --nnodes "
        "and --max-restarts to restart from the checkpoint",
        m.pp, m.dp_replicate, m.dp_shard, m.tp));
  }
  if (can.elastic != parallel::Elasticity::Fixed) return;
  throw std::invalid_argument(fmt::format(
      "dtrain launch --nnodes MIN:MAX: parallel.strategy {} cannot change size while it runs: {}; elastic "
      "jobs run {}; give a fixed --nnodes and --max-restarts to restart from the checkpoint at the new size",
      s, can.fixed_because, parallel::strategies_that([](const parallel::StrategyInfo& info) {
        return info.capabilities.elastic != parallel::Elasticity::Fixed;
      })));
}

void AdmitWaiting::on_step_end(train::Trainer& trainer, const train::StepEvent& event) {
  const auto& comm = trainer.communicator();
  double waiting = 0.0;
  if (!comm || comm->rank() == 0) waiting = membership_.someone_waiting(generation_) ? 1.0 : 0.0;
  if (comm && comm->size() > 1) {
    auto agreed = torch::tensor({waiting}, torch::kDouble);
    comm->allreduce(agreed, comm::ReduceOp::Max);
    waiting = agreed.item<double>();
  }
  if (waiting > 0.0 && !trainer.stop_requested()) trainer.request_stop(kAdmitReason);
  (void)event;
}

void start_generation(Generation& generation, train::Trainer& trainer, io::Logger& logger) {
  const auto& m = generation.members;
  trainer.add_callback(std::make_shared<AdmitWaiting>(*generation.membership, m.generation));
  const auto& start = generation.start;
  if (!start.checkpoint) {
    logger.info(fmt::format("elastic generation {}: {} member(s), starting without a state from a peer",
                            m.generation, m.world_size));
    return;
  }
  trainer.load_state(*start.checkpoint);
  generation.resumed_from_step = start.step;
  logger.info(fmt::format(
      "elastic generation {}: {} member(s), continuing from step {} with the state of rank {} "
      "({:.3g} MB over the communicator)",
      m.generation, m.world_size, trainer.step(), start.source_rank, static_cast<double>(start.bytes) / 1e6));
}

void agree_on_previous(Generation& generation, const Generation& previous, comm::Communicator* comm) {
  auto agreed = torch::tensor({static_cast<double>(previous.reached_step), previous.failed ? 1.0 : 0.0},
                              torch::kDouble);
  if (comm && comm->size() > 1) comm->allreduce(agreed, comm::ReduceOp::Max);
  generation.previous_reached = static_cast<std::int64_t>(agreed[0].item<double>());
  generation.previous_failed = agreed[1].item<double>() > 0.0;
}

void end_generation(Generation& generation, train::Trainer& trainer, const std::string& reason,
                    io::Logger& logger) {
  generation.ended = true;
  generation.end_reason = reason;
  const bool failed = reason != kAdmitReason;
  generation.reached_step = trainer.step();
  generation.failed = failed;
  if (failed && !holds_whole_state(trainer.config())) {
    // Sharded state: a lost member's shard is gone, and gathering the others' needs it too.
    logger.warning(fmt::format(
        "elastic generation {} ends at step {}: {}; parallel.strategy {} shards its state, so the next "
        "generation continues from the latest checkpoint on disk",
        generation.members.generation, trainer.step(), reason, trainer.config().parallel.strategy));
    return;
  }
  // After a failed collective the peers are gone: this member's own state only.
  io::Checkpoint state;
  trainer.save_state(state, /*gather=*/!failed);
  generation.end_state = std::move(state);
  generation.end_step = trainer.step();
  logger.warning(fmt::format("elastic generation {} ends at step {}: {}; joining the next with this state",
                             generation.members.generation, generation.end_step, reason));
}

void record_generation(const io::RunDir& run, const Generation& generation, std::int64_t first_step) {
  const auto& m = generation.members;
  nlohmann::json line = {{"generation", m.generation},
                         {"world_size", m.world_size},
                         {"first_step", first_step},
                         {"resumed_from_step", generation.resumed_from_step},
                         {"members", m.members},
                         {"state_from_rank", generation.start.source_rank},
                         {"state_bytes", generation.start.bytes},
                         {"recovery_seconds", util::seconds_since(generation.started)}};
  if (generation.previous_reached >= 0) {
    const auto begun = generation.previous_reached + (generation.previous_failed ? 1 : 0);
    line["steps_lost"] = begun - std::max<std::int64_t>(0, generation.resumed_from_step);
  }
  std::ofstream out(run.root() / "membership.jsonl", std::ios::app);
  out << line.dump() << "\n";
}

nlohmann::json generations_json(const io::RunDir& run) {
  nlohmann::json all = nlohmann::json::array();
  std::ifstream in(run.root() / "membership.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) all.push_back(nlohmann::json::parse(line));
  }
  return all;
}

}  // namespace dtrain::run
