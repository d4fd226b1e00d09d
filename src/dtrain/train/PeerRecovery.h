// A member that (re)joins an elastic job takes the training state from a live peer over the
// communicator instead of from the checkpoint on disk, as torchft's recovery does.
//
// Note [Recovering from a peer]
// After a membership change every member of the new generation holds either the state it trained
// to (a survivor: the model, the optimizer and the trainer's position, kept in memory as a
// checkpoint when its generation ended) or nothing (a newcomer, or a worker its launcher restarted).
// One collective settles it: the members all-reduce the highest step held, the lowest rank holding
// that step sends its state (a header of names, dtypes, shapes and metadata, then one flat buffer per
// dtype: a broadcast each, no archive) and every member loads it, so
// all continue from the same bits. A survivor whose last step failed mid-way kept the state before
// that step; one whose collective finished holds one step more and is chosen. So a lost member
// costs the step in flight, not the interval since the last checkpoint; checkpoints on disk stay for
// the whole job's failure (the store's host lost, every member lost).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dtrain/comm/Communicator.h"
#include "dtrain/io/Checkpoint.h"

namespace dtrain::train {

struct PeerState {
  std::optional<io::Checkpoint> checkpoint;  // none when no member held a state
  std::int64_t step = -1;                    // the step it was taken at
  int source_rank = -1;                      // the member that sent it
  std::uint64_t bytes = 0;                   // its size on the wire
};

// Collective over `comm` (every member calls it): `held` is this member's state, if any, taken at
// `step`. Returns the state every member now holds.
PeerState recover_from_peer(comm::Communicator& comm, const std::optional<io::Checkpoint>& held,
                            std::int64_t step);

}  // namespace dtrain::train
