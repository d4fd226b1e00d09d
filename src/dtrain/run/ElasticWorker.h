// A worker of an elastic job (`dtrain launch --nnodes MIN:MAX`): the settings its launcher hands it,
// the callback that admits a waiting member at a step boundary, and what one generation of the job
// starts from and ends with.
//
// Note [Elastic workers]
// An elastic worker trains in generations (Note [Membership rounds] in comm/rendezvous/ElasticMembership.h).
// Each generation it joins a round, connects a communicator of the round's size under the round's
// store prefix, recovers the training state from a peer (Note [Recovering from a peer]), and trains
// until one of three things ends the generation:
//   - the run finishes: the generation's rank 0 writes results.json, as any run does;
//   - a collective fails (a member died or its host was lost): every survivor keeps the state it
//     holds (the step before the failed one, or the failed one where its collective completed),
//     closes its communicator, which breaks the others' collectives too, and joins the next round;
//   - a worker waits in the next round: rank 0 sees it with one store read after each step, the
//     members agree on it in one all-reduce, stop at that step boundary and join the next round.
// At a new size the run continues as a resume on another number of workers does (Note [Resuming on
// another number of workers]): the weights, optimizer, schedule and step are the peer's; the epoch
// in progress finishes on the samples it had left (Note [An epoch across a size change] in
// data/EpochRemainder.h), the next ones are partitioned over the new size. membership.jsonl in the
// run folder says which generation ran from which step at which size, and results.json lists them.
// zero's members hold shards of the state: a member admitted at a step boundary gets the whole
// state gathered and resharded at the new size, but a lost member's shard is lost with it, so after
// a failure the next generation continues from the latest checkpoint on disk (the run folder's, as
// a restart does). Strategies whose state is split by stage (pipeline) or per graph node
// (decentralized) are refused: they restart from the checkpoint at the new size with a fixed
// --nnodes and --max-restarts. Which of the three a strategy is, and why a refused one is, its
// registration declares (parallel::Elasticity in parallel/Registry.h).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/comm/rendezvous/ElasticMembership.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/Logger.h"
#include "dtrain/io/RunDir.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/train/Callback.h"
#include "dtrain/train/PeerRecovery.h"

namespace dtrain::run {

// What `dtrain launch --nnodes MIN:MAX` tells each worker it starts (launch/Launcher.h).
using launch::kElasticIdVariable;
using launch::kElasticLastCallVariable;
using launch::kElasticVariable;

// The elastic settings in `env`, or none when this worker is not one of an elastic job. Throws
// std::invalid_argument naming the variable when one is malformed.
std::optional<comm::ElasticOptions> elastic_options(const comm::Environment& env);
std::string elastic_member_id(const comm::Environment& env);

// Refuses, naming the strategy and the rule, a configuration an elastic job cannot keep across a
// size change (see the Note): a strategy whose registration declares Elasticity::Fixed, with its
// reason (parallel/Registry.h, StrategyCapabilities), and a parallel.mesh, whose degrees fix the size.
void check_elastic(const config::RunConfig& cfg);
// Whether every member holds the whole training state (Elasticity::WholeState), so that a survivor
// can hand it on; with Elasticity::ShardedState the members hold shards.
bool holds_whole_state(const config::RunConfig& cfg);

// The stop reason of a generation ended to admit a waiting member.
inline constexpr const char* kAdmitReason = "a worker is waiting to join: admitting it at this step";

// After each step: whether a worker waits in the next round (rank 0 reads the store), agreed by
// every member in one all-reduce; then the trainer stops at this step with kAdmitReason.
class AdmitWaiting final : public train::Callback {
 public:
  AdmitWaiting(comm::ElasticMembership& membership, int generation)
      : membership_(membership), generation_(generation) {}
  void on_step_end(train::Trainer& trainer, const train::StepEvent& event) override;

 private:
  comm::ElasticMembership& membership_;
  int generation_;
};

// One generation: what it starts from, and what it ends with.
struct Generation {
  comm::ElasticMembership* membership = nullptr;
  comm::Membership members;
  std::chrono::steady_clock::time_point started;  // when the round closed
  train::PeerState start;  // recovered from a peer; no checkpoint when nobody held a state
  // The step of the state it started from (from a peer, or the latest checkpoint), as the
  // generation that saved it counted; -1 for none.
  std::int64_t resumed_from_step = -1;
  // Set when the generation ended without finishing the run, with the state to carry to the next
  // where this member has one (none for a sharded strategy after a failure: Note [Elastic workers]).
  bool ended = false;
  std::optional<io::Checkpoint> end_state;
  std::int64_t end_step = -1;
  std::string end_reason;
  // The step this member reached, and whether a failure ended the generation (a step was in flight).
  std::int64_t reached_step = -1;
  bool failed = false;
  // Of the previous generation, agreed by every member: the furthest step reached, and whether it
  // failed; -1 in the first generation.
  std::int64_t previous_reached = -1;
  bool previous_failed = false;
};

// The generation's start in `trainer` (built, its callbacks added): AdmitWaiting, and the state
// recovered from a peer loaded; logs where it came from.
void start_generation(Generation& generation, train::Trainer& trainer, io::Logger& logger);
// Every member's view of the previous generation, agreed over the new one's communicator (one
// all-reduce): the furthest step reached and whether a failure ended it.
void agree_on_previous(Generation& generation, const Generation& previous, comm::Communicator* comm);
// Keeps `trainer`'s state as the generation's end_state, for the next; logs why it ended.
void end_generation(Generation& generation, train::Trainer& trainer, const std::string& reason,
                    io::Logger& logger);

// membership.jsonl in the run folder: one line per generation, written by its rank 0 once its state
// is loaded (from a peer, or from the latest checkpoint): generation, world size, first step (as this
// size counts steps), the step the state was saved at (as the size that saved it counts them; -1:
// none), members, the rank the state came from (-1: not a peer), its bytes, and the seconds from the
// round's close to the state loaded, and the steps it lost: those the previous generation had begun,
// the one in flight at a failure included, that this one trains again (0 after an admission, 1 after a
// failure with the state from a peer, more where it continues from a checkpoint).
void record_generation(const io::RunDir& run, const Generation& generation, std::int64_t first_step);
// Those lines, as results.json's "generations".
nlohmann::json generations_json(const io::RunDir& run);

}  // namespace dtrain::run
