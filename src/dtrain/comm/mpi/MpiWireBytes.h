// The bytes each rank sends in the algorithms the mpi backend runs, for its CommStats: dtrain's own
// all-reduce exactly, and what OpenMPI 4.1 runs for its collectives. See Note [OpenMPI's algorithms].
// Internal to comm/mpi.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/comm/WireBytes.h"
#include "dtrain/comm/mpi/MpiAllreduce.h"

namespace dtrain::comm::mpi {

// Note [OpenMPI's algorithms]
// The asynchronous all-reduce is dtrain's own step list (MpiAllreduce.h): its bytes are exact.
// Everything else is OpenMPI's choice. Read from OpenMPI v4.1.4 (Debian bookworm's openmpi 4.1.4),
// assuming default MCA settings: coll/tuned (priority 30) serves blocking collectives with its
// fixed decision rules (coll_tuned_use_dynamic_rules false), and coll/libnbc (priority 10; adapt
// and han have priority 0) serves the non-blocking ones.
// - MPI_Allreduce (blocking): ompi_coll_tuned_allreduce_intra_dec_fixed
//   (coll_tuned_decision_fixed.c) picks by world size and bytes, for commutative operations (all
//   of dtrain's, float16 and bfloat16 included): 1 basic linear (reduce to 0, then 0 sends to
//   all), 2 nonoverlapping (tuned reduce + tuned bcast), 3 recursive doubling, 4 ring, 5 segmented
//   ring, 6 Rabenseifner (reduce-scatter by recursive halving, all-gather by recursive doubling).
//   coll_base_allreduce.c: 3 and 4 send what dtrain's step lists of the same names send (the same
//   schedules and block sizes); 4 falls back to 3 for fewer elements than ranks; 5 is called with
//   segment size 0 and so always falls back to 4; 6 falls back to 1 for fewer elements than the
//   largest power of two <= n. All exact except 2, which OpenMPI picks only on 128 ranks or more
//   for small buffers: its reduce and bcast are chosen by further decision tables that dtrain
//   does not model; it is counted as a tree reduce (every rank but the root sends the buffer
//   once, as every tree reduce does) and a binomial bcast, an estimate.
// - MPI_Iallgather (asynchronous): libnbc's linear schedule (nbc_iallgather.c; recursive doubling
//   only when forced): each rank sends its input to every other, (n-1) x the input.
// - MPI_Allgather (blocking): tuned's fixed rules pick two_proc on 2 ranks and recursive doubling
//   below 32 (Bruck where n is not a power of two), ring or neighbour exchange above: each sends
//   n-1 blocks of the input, (n-1) x the input, as libnbc's schedule does.
// - MPI_Ibcast: libnbc (nbc_ibcast.c, coll_libnbc_ibcast_skip_dt_decision true): linear for
//   n <= 4 (the root sends to every rank), else a binomial tree whose virtual ranks swap 0 and the
//   root.
// - MPI_Ialltoall (not in place): libnbc's linear schedule: (n-1)/n of the input.
// - MPI_Ireduce_scatter_block: libnbc's binomial reduce of the whole input to rank 0 (every other
//   rank sends the input once), then rank 0 sends each rank its chunk.
// - MPI_Reduce_scatter_block (blocking): tuned's fixed rules
//   (ompi_coll_tuned_reduce_scatter_block_intra_dec_fixed) pick by world size and block bytes
//   among 1 basic linear (tuned's MPI_Reduce of the whole input to rank 0, by its own rules, then
//   tuned's MPI_Scatter, by its own: linear, or binomial, where a rank forwards its subtree's
//   blocks), 2 recursive doubling (at step 2^k a rank sends every block outside its and its
//   partner's subtrees; without a partner, a rank that has the data sends it on by recursive
//   halving), 3 recursive halving and 4 butterfly (both first fold the 2r ranks above the largest
//   power of two into r: each even one hands its whole input to its odd partner and later gets its
//   block back; butterfly ends with a mirror-permuted exchange of blocks). Counted with each
//   function's own index arithmetic (coll_base_reduce_scatter_block.c). In every tree reduce each
//   rank but the tree's root sends the whole buffer once; the in-order binary tree is rooted at
//   n - 1, which sends the result on to rank 0. On two ranks the rules pick basic linear from a
//   block of 131072 bytes up and otherwise an exchange of the peer's block.
// - MPI_Ibarrier: dissemination with zero-byte messages. Isend: the tensor; Irecv: nothing.
// Another OpenMPI version, an MCA setting that forces an algorithm or raises another component's
// priority, or another MPI library may choose differently; the figures then describe these
// algorithms, not what ran.

// OpenMPI's tuned MPI_Allreduce algorithms, numbered as coll_tuned_allreduce_algorithm numbers them.
enum class TunedAllreduce {
  BasicLinear = 1,
  Nonoverlapping = 2,
  RecursiveDoubling = 3,
  Ring = 4,
  SegmentedRing = 5,
  Rabenseifner = 6
};

// The algorithm OpenMPI 4.1's fixed rules pick for a commutative all-reduce of `bytes` on `size` ranks.
TunedAllreduce tuned_allreduce_algorithm(int size, std::uint64_t bytes);
// Bytes `rank` sends in OpenMPI 4.1's MPI_Allreduce of `count` elements of `element_size` bytes.
std::uint64_t tuned_allreduce_bytes(int rank, int size, std::size_t count, std::size_t element_size);

// The algorithm OpenMPI 4.1's fixed rules pick for a commutative MPI_Reduce_scatter_block of
// `block_bytes` per rank on `size` ranks: 1 basic linear, 2 recursive doubling, 3 recursive
// halving, 4 butterfly (coll_tuned_reduce_scatter_block_algorithm's numbers).
int tuned_reduce_scatter_block_algorithm(int size, std::uint64_t block_bytes);
// Bytes `rank` sends in OpenMPI 4.1's MPI_Reduce_scatter_block of `rcount` elements per rank.
std::uint64_t tuned_reduce_scatter_block_bytes(int rank, int size, std::size_t rcount,
                                               std::size_t element_size);

// Bytes the steps send.
std::uint64_t bytes_sent(const std::vector<AllreduceStep>& steps, std::size_t element_size);

// What rank `rank` of `size` sends for `call` on the mpi backend.
std::uint64_t mpi_wire_bytes(const WireCall& call, int rank, int size);

}  // namespace dtrain::comm::mpi
