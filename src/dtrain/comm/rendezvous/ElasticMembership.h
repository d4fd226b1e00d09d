// Elastic membership: which workers make up the job now, agreed in rounds on the rendezvous store,
// as torchrun's elastic rendezvous (torch/distributed/elastic/rendezvous) and torchft's quorum do.
//
// Note [Membership rounds]
// A job declared for MIN:MAX members runs in generations. Generation g's round lives under
// "elastic/<run id>/g<g>/": each worker that wants to train takes an arrival number with one atomic
// add and writes its record (its id and its rank in the generation it comes from, -1 for a new
// one) under that number. The first to arrive leads the round: it closes it as soon as MAX have
// arrived, or once at least MIN have and nobody new has come for `last_call` (it alone polls the
// counter, every 10 ms), by waiting for the admitted arrivals' records in one request, reading them
// in one more (MultiGet), and writing every record in rank order, then the member count. The
// others each park one Wait on the count (Note [Store waits] in comm/store/StoreWire.h), woken
// together by that one write, and read the list: a round costs the store a few requests a member
// and no polling, whatever the number waiting. A member killed between its arrival and its record
// is left out once the round's timeout passes, rather than stalling the round. Ranks keep the
// survivors' order (by their previous rank) and put newcomers after them in arrival order, so a
// job that loses a member renumbers as little as it can. Every member reading or holding the whole
// list makes a round's work grow as N²; so a member keeps only its rank and the size, and rank 0
// alone the list (the run folder records it). When every survivor's record names its rank in
// generation g-1 (checked against g-1's list), the leader also writes the change: g-1's size, the
// ranks lost, and the newcomers' records. A member of g-1 (join(previous)) reads that change and
// takes its new rank as its old one less the ranks lost below it, in the change's length; anyone
// else finds itself in the whole list. A worker that arrives after the round
// closed is late: it goes on to generation g+1, whose first arrival the running generation sees
// with one store read (someone_waiting) and admits at its next step boundary. Fewer than MIN by the
// timeout is an error naming both counts. The store's host (node 0's launcher) is the one member
// the job cannot lose; torchrun's c10d rendezvous backend has the same single point.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/comm/store/StoreClient.h"

namespace dtrain::comm {

struct ElasticOptions {
  int min_members = 1;
  int max_members = 1;
  // How long the round's leader waits for one more member once MIN have arrived (torchrun's
  // last_call_timeout).
  std::chrono::milliseconds last_call{std::chrono::seconds(1)};
  // How long a round may take to reach MIN members, and a member to wait for the round's close.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::string run_id = "none";
};

struct Membership {
  int generation = 0;
  int rank = 0;
  int world_size = 1;
  // On rank 0 only (what the run folder records), empty elsewhere: ids in rank order, and each
  // member's rank in the generation it came from (-1 for new). See Note [Membership rounds].
  std::vector<std::string> members;
  std::vector<int> previous_ranks;
  // The store prefix of this generation's process group: "elastic/<run id>/g<g>/pg/".
  std::string store_prefix;
};

// join() finds the job over: its last generation finished the run before this member got in.
class JobFinished : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ElasticMembership {
 public:
  // `member_id` must be unique in the job (host name, pid and local rank make one).
  ElasticMembership(StoreClient& store, ElasticOptions options, std::string member_id);

  // Joins the first generation from `generation` on whose round it gets into, as the member that
  // had `previous_rank` in the generation before (-1: new). Throws std::runtime_error naming the
  // counts when fewer than min_members arrive within the timeout.
  Membership join(int generation, int previous_rank);
  // The same as join(previous.generation + 1, previous.rank), for a member of `previous`: when its
  // round's leader can describe the new list as `previous`'s less the members lost plus the
  // newcomers, this member reads that change alone instead of the whole list (Note [Membership
  // rounds]).
  Membership join(const Membership& previous);

  // Whether some worker waits in the round after `generation` (one store read).
  bool someone_waiting(int generation);

  // Says in the store that the run has finished, so that a member still waiting to join learns it
  // (JobFinished) instead of waiting for a round that never closes.
  void mark_finished();

  const ElasticOptions& options() const { return options_; }

 private:
  std::string prefix(int generation) const;
  Membership join(int generation, int previous_rank, const Membership* previous);
  // As the leader of generation g's round: waits for its members and closes it; returns the count.
  int lead(int generation);
  // The round's member count once its leader has closed it, and the value of `list_key` (the list
  // or its change), read with it; throws JobFinished when the run ends first, std::runtime_error
  // after the timeout.
  int wait_closed(const std::string& round, const std::string& list_key, std::optional<std::string>& list);
  void throw_if_finished();

  StoreClient& store_;
  ElasticOptions options_;
  std::string id_;
};

}  // namespace dtrain::comm
