// The bytes each rank sends in the Gloo algorithms that c10d's ProcessGroupGloo (LibTorch 1.13)
// runs, for the gloo backend's CommStats. See Note [Gloo's algorithms].
#pragma once

#include <cstdint>

#include "dtrain/comm/WireBytes.h"

namespace dtrain::comm {

// Note [Gloo's algorithms]
// Read from c10d's ProcessGroupGloo.cpp (AsyncAllreduceWork, AsyncAllgatherWork,
// AsyncBroadcastWork, AsyncAlltoallWork, AsyncBarrierWork, send/recv), which call Gloo's
// gloo::allreduce, allgather, broadcast, alltoall and barrier with default options, and from those
// algorithms in Gloo as Debian packages it (libgloo 0.0~git20220518.5b14351: gloo/allreduce.cc,
// allgather.cc, broadcast.cc, alltoall.cc, barrier.cc):
// - allreduce: the ring (AllreduceOptions' algorithm is UNSPECIFIED, which runs ring()). The buffer
//   is cut into numSegments = roundUp(max(ceil(bytes / 1 MiB), 2n), n) segments of
//   roundUp(ceil(bytes / numSegments), element size) bytes, the last ones shorter or empty; in the
//   reduce-scatter a rank sends segments (rank+1)*k + i, and in the all-gather segments rank*k + i,
//   for i < numSegments - k (k = numSegments / n, indices modulo numSegments), each clipped to the
//   buffer. About 2(n-1)/n of the buffer, but not exactly, and not the same on every rank.
// - allgather (c10d flattens the inputs; so does dtrain's flat allgather): a ring of n-1 steps,
//   each sending one rank's input in two halves: (n-1) x the input.
// - broadcast: a binomial tree rooted at `root` (virtual rank v = (rank - root) mod n; in round i
//   ranks v < 2^i send to v + 2^i when that is below n): the root and every inner node of the tree
//   send the whole buffer once per child.
// - alltoall (equal splits): one chunk to each other rank, (n-1)/n of the input.
// - reduce_scatter: dtrain's own ring on the group's Gloo context (Note [Gloo's native
//   collectives]): n-1 steps of one chunk each, (n-1)/n of the input, the alltoall's figure.
// - allgather also runs as gloo::allgather on that context: the ring above, the same bytes.
// - barrier: a dissemination barrier of zero-byte messages. send: the tensor; recv: nothing.

// What rank `rank` of `size` sends for `call` under the algorithms above.
std::uint64_t gloo_wire_bytes(const WireCall& call, int rank, int size);

// The ring all-reduce alone: bytes sent by `rank` for a buffer of `bytes` bytes of elements of
// `element_size` bytes.
std::uint64_t gloo_ring_allreduce_bytes(int rank, int size, std::uint64_t bytes, std::uint64_t element_size);
// The binomial-tree broadcast alone.
std::uint64_t gloo_broadcast_bytes(int rank, int size, int root, std::uint64_t bytes);

}  // namespace dtrain::comm
