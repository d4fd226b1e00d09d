// Step lists of the recursive-doubling and ring all-reduces, and the polled run that executes them.
// The schedules are those of MPICH/OpenMPI (Thakur, Rabenseifner, Gropp 2005); every element is
// reduced in the same order on every rank, so all ranks end with bitwise identical results.
#include "dtrain/comm/mpi/MpiAllreduce.h"

#include <algorithm>

namespace dtrain::comm::mpi {
namespace {

// Below this size the all-reduce is latency-bound and recursive doubling (log2 n rounds of the
// whole buffer) wins; above it the ring (2(n-1) rounds of 1/n of it) moves fewer bytes per rank.
constexpr std::size_t kRingThresholdBytes = 64 * 1024;

}  // namespace

std::vector<AllreduceStep> recursive_doubling_steps(int rank, int size, std::size_t count) {
  std::vector<AllreduceStep> steps;
  int pof2 = 1;
  while (pof2 * 2 <= size) pof2 *= 2;
  const int rem = size - pof2;

  // Fold the first 2*rem ranks pairwise so that pof2 ranks remain.
  int new_rank = rank - rem;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      steps.push_back({rank + 1, 0, count, -1, 0, 0, false});
      new_rank = -1;
    } else {
      steps.push_back({-1, 0, 0, rank - 1, 0, count, true});
      new_rank = rank / 2;
    }
  }
  if (new_rank >= 0) {
    for (int mask = 1; mask < pof2; mask <<= 1) {
      const int new_peer = new_rank ^ mask;
      const int peer = new_peer < rem ? new_peer * 2 + 1 : new_peer + rem;
      steps.push_back({peer, 0, count, peer, 0, count, true});
    }
  }
  // Hand the result back to the folded ranks.
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      steps.push_back({-1, 0, 0, rank + 1, 0, count, false});
    } else {
      steps.push_back({rank - 1, 0, count, -1, 0, 0, false});
    }
  }
  return steps;
}

std::vector<AllreduceStep> ring_steps(int rank, int size, std::size_t count) {
  const std::size_t n = static_cast<std::size_t>(size);
  const std::size_t base = count / n;
  const std::size_t extra = count % n;
  auto offset = [&](std::size_t c) { return c * base + std::min(c, extra); };
  auto length = [&](std::size_t c) { return base + (c < extra ? 1 : 0); };
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;

  std::vector<AllreduceStep> steps;
  // Reduce-scatter: after n-1 rounds this rank holds the full reduction of chunk (rank+1) % n.
  for (int s = 0; s < size - 1; ++s) {
    const std::size_t send_chunk = static_cast<std::size_t>((rank - s + 2 * size) % size);
    const std::size_t recv_chunk = static_cast<std::size_t>((rank - s - 1 + 2 * size) % size);
    steps.push_back(
        {right, offset(send_chunk), length(send_chunk), left, offset(recv_chunk), length(recv_chunk), true});
  }
  // All-gather the reduced chunks around the same ring, straight into the buffer.
  for (int s = 0; s < size - 1; ++s) {
    const std::size_t send_chunk = static_cast<std::size_t>((rank + 1 - s + 2 * size) % size);
    const std::size_t recv_chunk = static_cast<std::size_t>((rank - s + 2 * size) % size);
    steps.push_back(
        {right, offset(send_chunk), length(send_chunk), left, offset(recv_chunk), length(recv_chunk), false});
  }
  return steps;
}

std::vector<AllreduceStep> allreduce_steps(int rank, int size, std::size_t count, std::size_t element_size) {
  const bool ring = count * element_size >= kRingThresholdBytes && count >= static_cast<std::size_t>(size);
  return ring ? ring_steps(rank, size, count) : recursive_doubling_steps(rank, size, count);
}

std::size_t recursive_doubling_sent(int rank, int size, std::size_t count) {
  int pof2 = 1, rounds = 0;
  while (pof2 * 2 <= size) {
    pof2 *= 2;
    ++rounds;
  }
  const int rem = size - pof2;
  if (rank < 2 * rem && rank % 2 == 0) return count;  // folds into rank + 1, then only receives
  // Every round, and an odd folded rank hands the result back too.
  return count * static_cast<std::size_t>(rounds) + (rank < 2 * rem ? count : 0);
}

std::size_t ring_sent(int rank, int size, std::size_t count) {
  // Every chunk but (rank + 1) % n in the reduce-scatter, every chunk but (rank + 2) % n in the
  // all-gather (ring_steps' indices).
  const std::size_t n = static_cast<std::size_t>(size);
  const std::size_t base = count / n;
  const std::size_t extra = count % n;
  auto length = [&](std::size_t c) { return base + (c < extra ? 1 : 0); };
  const auto r = static_cast<std::size_t>(rank);
  return 2 * count - length((r + 1) % n) - length((r + 2) % n);
}

std::size_t allreduce_sent(int rank, int size, std::size_t count, std::size_t element_size) {
  const bool ring = count * element_size >= kRingThresholdBytes && count >= static_cast<std::size_t>(size);
  return ring ? ring_sent(rank, size, count) : recursive_doubling_sent(rank, size, count);
}

std::size_t scratch_elements(const std::vector<AllreduceStep>& steps) {
  std::size_t most = 0;
  for (const auto& step : steps) {
    if (step.recv_into_scratch) most = std::max(most, step.recv_count);
  }
  return most;
}

AllreduceRun::AllreduceRun(std::vector<AllreduceStep> steps, void* buffer, void* scratch,
                           MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, int tag)
    : steps_(std::move(steps)),
      buffer_(buffer),
      scratch_(scratch),
      datatype_(datatype),
      op_(op),
      comm_(comm),
      tag_(tag) {}

int AllreduceRun::start() {
  MPI_Aint lower_bound = 0;
  MPI_Aint extent = 0;
  if (int rc = MPI_Type_get_extent(datatype_, &lower_bound, &extent); rc != MPI_SUCCESS) return rc;
  extent_ = static_cast<std::size_t>(extent);
  next_ = 0;
  return steps_.empty() ? MPI_SUCCESS : post(steps_[0]);
}

int AllreduceRun::post(const AllreduceStep& step) {
  // Receive first: a message that arrives before its receive is posted costs an extra copy.
  if (step.peer_recv >= 0) {
    void* target = step.recv_into_scratch ? scratch_ : at(buffer_, step.recv_offset);
    if (int rc = MPI_Irecv(target, static_cast<int>(step.recv_count), datatype_, step.peer_recv, tag_, comm_,
                           &requests_[1]);
        rc != MPI_SUCCESS) {
      return rc;
    }
  }
  if (step.peer_send >= 0) {
    if (int rc = MPI_Isend(at(buffer_, step.send_offset), static_cast<int>(step.send_count), datatype_,
                           step.peer_send, tag_, comm_, &requests_[0]);
        rc != MPI_SUCCESS) {
      return rc;
    }
  }
  return MPI_SUCCESS;
}

int AllreduceRun::advance(bool& done) {
  done = false;
  while (next_ < steps_.size()) {
    int finished = 0;
    if (int rc = MPI_Testall(2, requests_, &finished, MPI_STATUSES_IGNORE); rc != MPI_SUCCESS) return rc;
    if (!finished) return MPI_SUCCESS;
    const AllreduceStep& step = steps_[next_];
    if (step.recv_into_scratch && step.recv_count > 0) {
      if (int rc = MPI_Reduce_local(scratch_, at(buffer_, step.recv_offset),
                                    static_cast<int>(step.recv_count), datatype_, op_);
          rc != MPI_SUCCESS) {
        return rc;
      }
    }
    if (++next_ < steps_.size()) {
      if (int rc = post(steps_[next_]); rc != MPI_SUCCESS) return rc;
    }
  }
  done = true;
  return MPI_SUCCESS;
}

}  // namespace dtrain::comm::mpi
