// The bytes each rank sends on the mpi backend; see Note [OpenMPI's algorithms]. The loops follow
// OpenMPI's own index arithmetic so that the per-rank figures are exact, rounding included.
#include "dtrain/comm/mpi/MpiWireBytes.h"

#include <limits>

namespace dtrain::comm::mpi {
namespace {

// One row of the fixed rules: for world sizes below `ranks_below`, the first band whose
// `bytes_below` exceeds the buffer's bytes names the algorithm.
struct Band {
  std::uint64_t bytes_below;
  int algorithm;
};
struct Row {
  int ranks_below;
  std::vector<Band> bands;
};

constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();

// ompi_coll_tuned_allreduce_intra_dec_fixed, OpenMPI v4.1.4, commutative operations.
const std::vector<Row>& tuned_allreduce_rules() {
  static const std::vector<Row> rules{
      {4, {{8, 4}, {4096, 3}, {8192, 4}, {16384, 3}, {65536, 4}, {262144, 5}, {kAny, 6}}},
      {8, {{16, 4}, {8192, 3}, {kAny, 6}}},
      {16, {{8192, 3}, {kAny, 6}}},
      {32, {{64, 5}, {4096, 3}, {kAny, 6}}},
      {64, {{128, 5}, {kAny, 6}}},
      {128, {{262144, 3}, {kAny, 6}}},
      {256, {{131072, 2}, {262144, 3}, {kAny, 6}}},
      {512, {{4096, 2}, {kAny, 6}}},
      {2048, {{2048, 2}, {16384, 3}, {kAny, 6}}},
      {4096, {{2048, 2}, {4096, 5}, {16384, 3}, {kAny, 6}}},
      {std::numeric_limits<int>::max(), {{2048, 2}, {16384, 5}, {32768, 3}, {kAny, 6}}},
  };
  return rules;
}

int floor_power_of_two(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Reduce to rank 0, then rank 0 sends the result to every rank (both linear).
std::uint64_t basic_linear_bytes(int rank, int size, std::uint64_t bytes) {
  return rank == 0 ? static_cast<std::uint64_t>(size - 1) * bytes : bytes;
}

// A binomial tree from the root at virtual rank v: v sends to v + 2^i for every 2^i > v below n.
std::uint64_t binomial_bcast_bytes(int v, int size, std::uint64_t bytes) {
  std::uint64_t sent = 0;
  for (int step = 1; step < size; step *= 2) {
    if (v < step && v + step < size) sent += bytes;
  }
  return sent;
}

// ompi_coll_base_allreduce_intra_redscat_allgather, counted in elements.
std::uint64_t rabenseifner_elements(int rank, int size, std::uint64_t count) {
  const int pof2 = floor_power_of_two(size);
  const int rem = size - pof2;
  std::uint64_t sent = 0;
  int vrank = rank - rem;
  if (rank < 2 * rem) {
    const std::uint64_t lhalf = count / 2;
    const std::uint64_t rhalf = count - lhalf;
    // Odd ranks send their left half, then the reduced right half, and leave; even ones their right half.
    sent += rank % 2 != 0 ? lhalf + rhalf : rhalf;
    vrank = rank % 2 != 0 ? -1 : rank / 2;
  }
  if (vrank < 0) return sent;
  std::uint64_t window = count;
  std::vector<std::uint64_t> kept;  // rcount[step]: the half reduced here, sent back in the all-gather
  for (int mask = 1; mask < pof2; mask <<= 1) {
    const int vdest = vrank ^ mask;
    const int dest = vdest < rem ? vdest * 2 : vdest + rem;
    const std::uint64_t receive = rank < dest ? window / 2 : window - window / 2;
    sent += window - receive;
    kept.push_back(receive);
    window = receive;
  }
  for (const auto k : kept) sent += k;
  if (rank < 2 * rem) sent += count;  // the even rank hands the result to its odd partner
  return sent;
}

}  // namespace

TunedAllreduce tuned_allreduce_algorithm(int size, std::uint64_t bytes) {
  for (const auto& row : tuned_allreduce_rules()) {
    if (size >= row.ranks_below) continue;
    for (const auto& band : row.bands) {
      if (bytes < band.bytes_below) return static_cast<TunedAllreduce>(band.algorithm);
    }
  }
  return TunedAllreduce::Rabenseifner;
}

std::uint64_t bytes_sent(const std::vector<AllreduceStep>& steps, std::size_t element_size) {
  std::uint64_t elements = 0;
  for (const auto& step : steps) {
    if (step.peer_send >= 0) elements += step.send_count;
  }
  return elements * element_size;
}

std::uint64_t tuned_allreduce_bytes(int rank, int size, std::size_t count, std::size_t element_size) {
  if (size < 2) return 0;
  const std::uint64_t bytes = static_cast<std::uint64_t>(count) * element_size;
  switch (tuned_allreduce_algorithm(size, bytes)) {
    case TunedAllreduce::BasicLinear:
      return basic_linear_bytes(rank, size, bytes);
    case TunedAllreduce::Nonoverlapping:  // an estimate: see Note [OpenMPI's algorithms]
      return (rank == 0 ? 0 : bytes) + binomial_bcast_bytes(rank, size, bytes);
    case TunedAllreduce::RecursiveDoubling:
      return bytes_sent(recursive_doubling_steps(rank, size, count), element_size);
    case TunedAllreduce::Ring:
    case TunedAllreduce::SegmentedRing:  // segment size 0: the plain ring
      if (count < static_cast<std::size_t>(size)) {
        return bytes_sent(recursive_doubling_steps(rank, size, count), element_size);
      }
      return bytes_sent(ring_steps(rank, size, count), element_size);
    case TunedAllreduce::Rabenseifner:
      if (count < static_cast<std::size_t>(floor_power_of_two(size))) {
        return basic_linear_bytes(rank, size, bytes);
      }
      return rabenseifner_elements(rank, size, count) * element_size;
  }
  return 0;
}

std::uint64_t mpi_wire_bytes(const WireCall& call, int rank, int size) {
  const auto n = static_cast<std::uint64_t>(size);
  const std::uint64_t bytes = call.bytes();
  const auto count = static_cast<std::size_t>(call.numel);
  const auto element_size = static_cast<std::size_t>(call.element_size);
  switch (call.op) {
    case CommOp::Allreduce:
      return call.async_op ? bytes_sent(allreduce_steps(rank, size, count, element_size), element_size)
                           : tuned_allreduce_bytes(rank, size, count, element_size);
    case CommOp::Allgather:
      return (n - 1) * bytes;
    case CommOp::Broadcast: {
      if (size <= 4) return rank == call.root ? (n - 1) * bytes : 0;
      // libnbc's virtual ranks swap 0 and the root.
      const int v = rank == call.root ? 0 : (rank == 0 ? call.root : rank);
      return binomial_bcast_bytes(v, size, bytes);
    }
    case CommOp::ReduceScatter:
      if (!call.async_op && size == 2 && bytes / n < 131072) return bytes / n;  // tuned's exchange
      return rank == 0 ? (n - 1) * (bytes / n) : bytes;
    case CommOp::Alltoall:
      return (n - 1) * (bytes / n);
    case CommOp::Send:
      return bytes;
    case CommOp::Recv:
    case CommOp::Barrier:
      return 0;
  }
  return 0;
}

}  // namespace dtrain::comm::mpi
