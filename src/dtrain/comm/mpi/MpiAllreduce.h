// The mpi backend's all-reduce, written as a list of point-to-point steps over non-blocking MPI
// calls so that it can be polled against a deadline (a blocking MPI_Allreduce cannot time out) and
// still run the algorithms of OpenMPI's blocking "tuned" component (libnbc's MPI_Iallreduce is
// 2-3x slower on small buffers). Plain MPI, no LibTorch: internal to comm/mpi.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace dtrain::comm::mpi {

// One round: post the send and the receive (either may be absent), wait for both, then reduce the
// received elements into the buffer. Offsets and counts are in elements.
struct AllreduceStep {
  int peer_send = -1;  // -1: nothing to send
  std::size_t send_offset = 0;
  std::size_t send_count = 0;
  int peer_recv = -1;  // -1: nothing to receive
  std::size_t recv_offset = 0;
  std::size_t recv_count = 0;
  bool recv_into_scratch = false;  // true: receive into scratch, then reduce into buffer[recv_offset]
};

// Recursive doubling (log2 rounds, the whole buffer each round): the latency-bound choice.
// Ranks beyond the largest power of two first fold into a partner and get the result back at the end.
std::vector<AllreduceStep> recursive_doubling_steps(int rank, int size, std::size_t count);
// Ring: reduce-scatter then all-gather of size() chunks, 2(n-1) rounds: the bandwidth-bound choice.
std::vector<AllreduceStep> ring_steps(int rank, int size, std::size_t count);

// The steps dtrain's all-reduce of `count` elements of `element_size` bytes runs: recursive
// doubling below 64 KiB (latency-bound: log2 n rounds of the whole buffer), the ring from there on
// (2(n-1) rounds of 1/n of it: fewer bytes per rank), and recursive doubling for fewer elements
// than ranks.
std::vector<AllreduceStep> allreduce_steps(int rank, int size, std::size_t count, std::size_t element_size);

// The elements rank `rank` sends in each, without building the steps (CommStats counts every
// call's bytes, and at 4 KB a vector per call shows in latency).
std::size_t recursive_doubling_sent(int rank, int size, std::size_t count);
std::size_t ring_sent(int rank, int size, std::size_t count);
std::size_t allreduce_sent(int rank, int size, std::size_t count, std::size_t element_size);

// Elements the scratch buffer must hold for `steps`.
std::size_t scratch_elements(const std::vector<AllreduceStep>& steps);

// Runs `steps` on `buffer` (count elements of datatype) without blocking: start() posts the first
// round, advance() tests the current round and moves on; it returns true once every round is done.
// Reductions use MPI_Reduce_local, so user-defined operations (float16, bfloat16) work too. All
// rounds use one tag on `comm`; concurrent all-reduces on the same comm must use distinct tags.
class AllreduceRun {
 public:
  AllreduceRun(std::vector<AllreduceStep> steps, void* buffer, void* scratch, MPI_Datatype datatype,
               MPI_Op op, MPI_Comm comm, int tag);
  // Both return MPI error codes (MPI_SUCCESS when fine); advance() sets done.
  int start();
  int advance(bool& done);
  // The requests still posted (to cancel or to leave pending after a timeout).
  bool in_flight() const { return requests_[0] != MPI_REQUEST_NULL || requests_[1] != MPI_REQUEST_NULL; }

 private:
  int post(const AllreduceStep& step);
  char* at(void* base, std::size_t offset) const { return static_cast<char*>(base) + offset * extent_; }

  std::vector<AllreduceStep> steps_;
  std::size_t next_ = 0;
  void* buffer_;
  void* scratch_;
  MPI_Datatype datatype_;
  MPI_Op op_;
  MPI_Comm comm_;
  int tag_;
  std::size_t extent_ = 0;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace dtrain::comm::mpi
