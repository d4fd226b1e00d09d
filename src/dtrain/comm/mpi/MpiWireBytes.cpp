// The bytes each rank sends on the mpi backend; see Note [OpenMPI's algorithms]. The loops follow
// OpenMPI's own index arithmetic so that the per-rank figures are exact, rounding included.
#include "dtrain/comm/mpi/MpiWireBytes.h"

#include <algorithm>
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

// ompi_coll_tuned_reduce_scatter_block_intra_dec_fixed, OpenMPI v4.1.4, commutative operations;
// the bytes are one rank's block (dtype size x rcount).
const std::vector<Row>& tuned_reduce_scatter_block_rules() {
  static const std::vector<Row> rules{
      {4, {{4, 2}, {8, 4}, {16, 3}, {128, 4}, {256, 3}, {4096, 4}, {8192, 3}, {131072, 4}, {kAny, 1}}},
      {8, {{8, 3}, {32, 2}, {256, 4}, {8192, 3}, {16384, 4}, {1048576, 3}, {kAny, 1}}},
      {16, {{4, 1}, {32, 3}, {128, 4}, {524288, 3}, {4194304, 1}, {kAny, 4}}},
      {32, {{32, 1}, {524288, 3}, {2097152, 1}, {4194304, 3}, {kAny, 4}}},
      {std::numeric_limits<int>::max(), {{4, 3}, {16, 1}, {65536, 4}, {262144, 1}, {kAny, 4}}},
  };
  return rules;
}

// ompi_coll_tuned_reduce_intra_dec_fixed, OpenMPI v4.1.4, commutative operations; the bytes are
// the whole buffer's. 1 linear, 2 chain, 3 pipeline, 4 binary, 5 binomial, 6 in-order binary, 7
// Rabenseifner.
const std::vector<Row>& tuned_reduce_rules() {
  static const std::vector<Row> rules{
      {4, {{8, 7}, {16, 4}, {32, 3}, {262144, 1}, {524288, 3}, {1048576, 2}, {kAny, 3}}},
      {8, {{4096, 4}, {65536, 2}, {262144, 5}, {524288, 1}, {1048576, 5}, {kAny, 1}}},
      {16, {{8192, 4}, {kAny, 5}}},
      {32, {{4096, 4}, {kAny, 5}}},
      {256, {{kAny, 5}}},
      {512, {{8192, 5}, {16384, 6}, {kAny, 5}}},
      {2048, {{kAny, 5}}},
      {4096, {{512, 5}, {1024, 6}, {8192, 5}, {16384, 6}, {kAny, 5}}},
      {std::numeric_limits<int>::max(),
       {{16, 5}, {32, 6}, {1024, 5}, {2048, 6}, {8192, 5}, {16384, 6}, {kAny, 5}}},
  };
  return rules;
}

// ompi_coll_tuned_scatter_intra_dec_fixed, OpenMPI v4.1.4; the bytes are one rank's block. 1 basic
// linear, 2 binomial, 3 linear non-blocking.
const std::vector<Row>& tuned_scatter_rules() {
  static const std::vector<Row> rules{
      {4, {{2, 3}, {131072, 1}, {262144, 3}, {kAny, 1}}},
      {8, {{2048, 2}, {4096, 1}, {8192, 2}, {32768, 1}, {1048576, 3}, {kAny, 1}}},
      {16, {{16384, 2}, {1048576, 3}, {kAny, 1}}},
      {32, {{16384, 2}, {32768, 1}, {kAny, 3}}},
      {64, {{512, 2}, {8192, 3}, {16384, 2}, {kAny, 3}}},
      {std::numeric_limits<int>::max(), {{512, 2}, {kAny, 3}}},
  };
  return rules;
}

int pick(const std::vector<Row>& rules, int size, std::uint64_t bytes) {
  for (const auto& row : rules) {
    if (size >= row.ranks_below) continue;
    for (const auto& band : row.bands) {
      if (bytes < band.bytes_below) return band.algorithm;
    }
  }
  return rules.back().bands.back().algorithm;
}

std::uint64_t lowest_bit(int v) {
  return static_cast<std::uint64_t>(v & -v);
}

// OpenMPI's ompi_range_sum: blocks a..b of the halving algorithms' layout, where blocks up to r
// hold two ranks' chunks (an excluded even rank's and its odd partner's) and the rest one.
std::uint64_t range_sum(int a, int b, int r) {
  if (r < a) return static_cast<std::uint64_t>(b - a + 1);
  if (r > b) return 2 * static_cast<std::uint64_t>(b - a + 1);
  return 2 * static_cast<std::uint64_t>(r - a + 1) + static_cast<std::uint64_t>(b - r);
}

int mirror(int x, int bits) {
  int out = 0;
  for (int i = 0; i < bits; ++i) out |= ((x >> i) & 1) << (bits - 1 - i);
  return out;
}

int log2_of(int pof2) {
  int bits = 0;
  while ((1 << bits) < pof2) ++bits;
  return bits;
}

// In elements, rcount the block. Each follows its OpenMPI function's index arithmetic
// (coll_base_reduce_scatter_block.c, v4.1.4).
std::uint64_t rsb_basic_linear(int rank, int size, std::uint64_t rcount, std::size_t element_size) {
  const std::uint64_t total = rcount * static_cast<std::uint64_t>(size);
  std::uint64_t sent = 0;
  // The reduce to rank 0: every rank but the tree's root sends the whole buffer once, in every
  // tree algorithm; the in-order binary tree is rooted at size - 1, which then sends the result to
  // rank 0, so every rank sends once. (The table picks Rabenseifner only below 8 bytes on fewer
  // than 4 ranks, never for a reduce_scatter's whole buffer here.)
  const int reduce = pick(tuned_reduce_rules(), size, total * element_size);
  if (reduce == 6 || rank != 0) sent += total;
  // The scatter from rank 0.
  const int scatter = pick(tuned_scatter_rules(), size, rcount * element_size);
  if (rank == 0) {
    sent += static_cast<std::uint64_t>(size - 1) * rcount;
  } else if (scatter == 2) {  // binomial: a rank forwards the blocks of its subtree but its own
    const std::uint64_t subtree =
        std::min<std::uint64_t>(lowest_bit(rank), static_cast<std::uint64_t>(size - rank));
    sent += (subtree - 1) * rcount;
  }
  return sent;
}

std::uint64_t rsb_recursive_doubling(int rank, int size, std::uint64_t rcount) {
  std::uint64_t sent = 0;
  auto blocks = [&](int tree_root, int mask) {
    const int tail = size >= tree_root + mask ? size - tree_root - mask : 0;
    return rcount * static_cast<std::uint64_t>(tree_root + tail);
  };
  for (int mask = 1; mask < size; mask <<= 1) {
    const int remote = rank ^ mask;
    const int cur_tree_root = rank & ~(mask - 1);
    const int remote_tree_root = remote & ~(mask - 1);
    if (remote < size) sent += blocks(cur_tree_root, mask);
    if (remote_tree_root + mask > size) {
      // A process without a partner this step gets the result from one that has it.
      const int alldata = size - cur_tree_root - mask;
      for (int half = mask >> 1; half > 0; half >>= 1) {
        const int peer = rank ^ half;
        const int tree_root = rank & ~((half << 1) - 1);
        if (peer > rank && rank < tree_root + alldata && peer >= tree_root + alldata)
          sent += blocks(remote_tree_root, mask);
      }
    }
  }
  return sent;
}

std::uint64_t rsb_recursive_halving(int rank, int size, std::uint64_t rcount) {
  const int pof2 = floor_power_of_two(size);
  const int rem = size - pof2;
  const std::uint64_t total = rcount * static_cast<std::uint64_t>(size);
  std::uint64_t sent = 0;
  int vrank = rank - rem;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) return total;  // hands its input to rank + 1, then only receives
    vrank = rank / 2;
    sent += rcount;  // at the end, the excluded rank's result
  }
  int send_index = 0, recv_index = 0, last_index = pof2;
  for (int mask = pof2 >> 1; mask > 0; mask >>= 1) {
    const int vpeer = vrank ^ mask;
    if (vrank < vpeer) {
      send_index = recv_index + mask;
      sent += rcount * range_sum(send_index, last_index - 1, rem - 1);
    } else {
      recv_index = send_index + mask;
      sent += rcount * range_sum(send_index, recv_index - 1, rem - 1);
    }
    send_index = recv_index;
    last_index = recv_index + mask;
  }
  return sent;
}

std::uint64_t rsb_butterfly(int rank, int size, std::uint64_t rcount) {
  const std::uint64_t total = rcount * static_cast<std::uint64_t>(size);
  if ((size & (size - 1)) == 0) {
    std::uint64_t sent = 0, blocks = total;
    for (int mask = 1; mask < size; mask <<= 1) {
      blocks /= 2;
      sent += blocks;
    }
    return sent;
  }
  const int pof2 = floor_power_of_two(size);
  const int rem = size - pof2;
  if (rank < 2 * rem && rank % 2 == 0) return total;  // hands its input over, then receives
  const int vrank = rank < 2 * rem ? rank / 2 : rank - rem;
  std::uint64_t sent = 0;
  int blocks = pof2, send_index = 0, recv_index = 0;
  for (int mask = 1; mask < pof2; mask <<= 1) {
    blocks /= 2;
    if ((vrank & mask) == 0) {
      send_index += blocks;
    } else {
      recv_index += blocks;
    }
    sent += rcount * range_sum(send_index, send_index + blocks - 1, rem - 1);
    send_index = recv_index;
  }
  // Results go out by a mirror permutation, and to the excluded rank of a pair.
  const int vpeer = mirror(vrank, log2_of(pof2));
  if (vpeer < rem) sent += rcount;
  if (vpeer != vrank) sent += rcount;
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
      return recursive_doubling_sent(rank, size, count) * element_size;
    case TunedAllreduce::Ring:
    case TunedAllreduce::SegmentedRing:  // segment size 0: the plain ring
      if (count < static_cast<std::size_t>(size)) {
        return recursive_doubling_sent(rank, size, count) * element_size;
      }
      return ring_sent(rank, size, count) * element_size;
    case TunedAllreduce::Rabenseifner:
      if (count < static_cast<std::size_t>(floor_power_of_two(size))) {
        return basic_linear_bytes(rank, size, bytes);
      }
      return rabenseifner_elements(rank, size, count) * element_size;
  }
  return 0;
}

int tuned_reduce_scatter_block_algorithm(int size, std::uint64_t block_bytes) {
  return pick(tuned_reduce_scatter_block_rules(), size, block_bytes);
}

std::uint64_t tuned_reduce_scatter_block_bytes(int rank, int size, std::size_t rcount,
                                               std::size_t element_size) {
  if (size < 2 || rcount == 0) return 0;
  const auto block = static_cast<std::uint64_t>(rcount);
  std::uint64_t elements = 0;
  switch (tuned_reduce_scatter_block_algorithm(size, block * element_size)) {
    case 1:
      elements = rsb_basic_linear(rank, size, block, element_size);
      break;
    case 2:
      elements = rsb_recursive_doubling(rank, size, block);
      break;
    case 3:
      elements = rsb_recursive_halving(rank, size, block);
      break;
    default:
      elements = rsb_butterfly(rank, size, block);
      break;
  }
  return elements * element_size;
}

std::uint64_t mpi_wire_bytes(const WireCall& call, int rank, int size) {
  const auto n = static_cast<std::uint64_t>(size);
  const std::uint64_t bytes = call.bytes();
  const auto count = static_cast<std::size_t>(call.numel);
  const auto element_size = static_cast<std::size_t>(call.element_size);
  switch (call.op) {
    case CommOp::Allreduce:
      return call.async_op ? allreduce_sent(rank, size, count, element_size) * element_size
                           : tuned_allreduce_bytes(rank, size, count, element_size);
    case CommOp::Broadcast: {
      if (size <= 4) return rank == call.root ? (n - 1) * bytes : 0;
      // libnbc's virtual ranks swap 0 and the root.
      const int v = rank == call.root ? 0 : (rank == 0 ? call.root : rank);
      return binomial_bcast_bytes(v, size, bytes);
    }
    case CommOp::ReduceScatter:
      if (!call.async_op) return tuned_reduce_scatter_block_bytes(rank, size, count / n, element_size);
      return rank == 0 ? (n - 1) * (bytes / n) : bytes;
    default:  // the plain algorithms: libnbc's and tuned's all-gathers, the linear alltoall, Isend
      return plain_wire_bytes(call, rank, size);
  }
}

}  // namespace dtrain::comm::mpi
