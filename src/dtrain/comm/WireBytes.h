// What a backend's wire-byte model is asked: one operation as this rank issues it. Each backend
// answers with the bytes its own algorithm makes this rank send (Communicator::wire_bytes), and the
// Communicator records the answer in CommStats. See Note [Wire bytes].
#pragma once

#include <cstdint>

#include "dtrain/comm/Collectives.h"

namespace dtrain::comm {

// Note [Wire bytes]
// OpStats::wire_bytes is the payload of the messages this rank sends for an operation under the
// algorithm its backend runs for that call: for each message, the elements it carries times their
// size. Transport framing is not counted (TCP/IP headers, Gloo's per-message preamble, MPI
// envelopes, zero-byte synchronisation messages), nor is anything received. Each backend states the
// algorithm it assumes and where it comes from beside its model: gloo/GlooWireBytes.h (c10d's
// ProcessGroupGloo over Gloo's algorithms: exact), mpi/MpiWireBytes.h (dtrain's own all-reduce:
// exact; OpenMPI 4.1's tuned and libnbc choices under default MCA settings), nccl (NCCL picks ring
// or tree at run time: the ring's figure, an estimate). What the plain algorithm sends is each
// operation's WireForm in kCollectives (Collectives.h); a backend's model answers for the
// operations its algorithm runs otherwise and hands the rest to plain_wire_bytes.

struct WireCall {
  CommOp op = CommOp::Barrier;
  // Elements of the tensor the operation reduces or moves, and their size: allreduce, broadcast,
  // send, recv: the tensor; allgather: this rank's input; reduce_scatter, alltoall: the input
  // (size() chunks).
  std::int64_t numel = 0;
  std::int64_t element_size = 0;
  int root = 0;           // broadcast
  bool async_op = false;  // the mpi backend runs different all-reduce algorithms for the two
  // The elements are bfloat16 or float16, which c10d's Gloo may reduce by an exchange of its own
  // (Note [bfloat16 on Gloo] in c10d/C10dCommunicator.cpp).
  bool bfloat16 = false;
  bool float16 = false;

  std::uint64_t bytes() const { return static_cast<std::uint64_t>(numel) * element_size; }
  bool operator==(const WireCall& o) const {
    return op == o.op && numel == o.numel && element_size == o.element_size && root == o.root &&
           async_op == o.async_op && bfloat16 == o.bfloat16 && float16 == o.float16;
  }
};

// What `rank` of `size` sends for `call` under the plain algorithm of its row's WireForm.
std::uint64_t plain_wire_bytes(const WireCall& call, int rank, int size);

}  // namespace dtrain::comm
