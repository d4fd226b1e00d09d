// See PeerRecovery.h, Note [Recovering from a peer].
#include "dtrain/train/PeerRecovery.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cstring>

namespace dtrain::train {

PeerState recover_from_peer(comm::Communicator& comm, const std::optional<io::Checkpoint>& held,
                            std::int64_t step) {
  const int rank = comm.rank();
  const int world = comm.size();
  const std::int64_t mine = held ? step : -1;
  auto best = torch::tensor({static_cast<double>(mine)}, torch::kDouble);
  comm.allreduce(best, comm::ReduceOp::Max);
  PeerState state;
  state.step = static_cast<std::int64_t>(best.item<double>());
  if (state.step < 0) return state;
  // The lowest rank holding that step sends.
  auto source = torch::tensor({static_cast<double>(mine == state.step ? rank : world)}, torch::kDouble);
  comm.allreduce(source, comm::ReduceOp::Min);
  state.source_rank = static_cast<int>(source.item<double>());
  std::string bytes;
  if (rank == state.source_rank) bytes = held->to_bytes();
  auto size = torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kLong);
  comm.broadcast(size, state.source_rank);
  state.bytes = static_cast<std::uint64_t>(size.item<std::int64_t>());
  auto payload = torch::empty({static_cast<std::int64_t>(state.bytes)}, torch::kUInt8);
  if (rank == state.source_rank) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
  comm.broadcast(payload, state.source_rank);
  if (rank == state.source_rank) {
    state.checkpoint = held;
  } else {
    bytes.assign(static_cast<const char*>(payload.data_ptr()), state.bytes);
    state.checkpoint = io::Checkpoint::from_bytes(
        bytes, fmt::format("the state of step {} from rank {}", state.step, state.source_rank));
  }
  return state;
}

}  // namespace dtrain::train
