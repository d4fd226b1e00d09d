// The mpi backend's operations: how each is posted, tested and withdrawn.
#include "dtrain/comm/mpi/MpiOperation.h"

#include <fmt/format.h>

#include <climits>
#include <stdexcept>

#include "dtrain/comm/mpi/MpiRuntime.h"

namespace dtrain::comm::mpi {

namespace {

// Internal all-reduce messages are tagged by their sequence number; MPI guarantees tags up to 32767.
constexpr std::uint64_t kTagSpace = 32768;

}  // namespace

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(fmt::format("{} failed: {}", call, mpi_error_string(rc)));
}

int checked_count(const at::Tensor& t) {
  if (t.numel() > INT_MAX) {
    throw std::invalid_argument(
        fmt::format("the tensor has {} elements; MPI counts are int, so split it into "
                    "pieces of at most {} elements",
                    t.numel(), INT_MAX));
  }
  return static_cast<int>(t.numel());
}

bool RequestOperation::test() {
  int done = 0;
  check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), call_);
  return done != 0;
}

void TransferOperation::post(std::uint64_t) {
  if (direction_ == Direction::Send) {
    check_mpi(MPI_Isend(tensor_.data_ptr(), count_, datatype_, peer_, tag_, comm_, &request_), call());
  } else {
    check_mpi(MPI_Irecv(tensor_.data_ptr(), count_, datatype_, peer_, tag_, comm_, &request_), call());
  }
}

bool TransferOperation::test() {
  int done = 0;
  MPI_Status status;
  check_mpi(MPI_Test(&request_, &done, &status), call());
  if (done && direction_ == Direction::Receive) {
    int received = 0;
    MPI_Get_count(&status, datatype_, &received);
    if (received != count_) {
      throw std::runtime_error(fmt::format("received {} elements from rank {} (tag {}); the tensor holds {}",
                                           received, status.MPI_SOURCE, status.MPI_TAG, count_));
    }
  }
  return done != 0;
}

bool TransferOperation::cancel() {
  if (direction_ != Direction::Receive) return false;
  // Cancelling a receive completes locally, so this wait returns at once.
  MPI_Cancel(&request_);
  MPI_Wait(&request_, MPI_STATUS_IGNORE);
  return true;
}

void AllreduceOperation::post(std::uint64_t sequence) {
  auto steps =
      allreduce_steps(rank_, size_, static_cast<std::size_t>(tensor_.numel()), tensor_.element_size());
  // Uninitialised, unlike std::vector: zeroing megabytes per call would cost as much as the copy.
  // Plain new[] rather than at::empty: at 4 KB the dispatcher's cost shows in the latency.
  scratch_.reset(new char[scratch_elements(steps) * tensor_.element_size()]);
  run_.emplace(std::move(steps), tensor_.data_ptr(), scratch_.get(), datatype_, op_, comm_,
               static_cast<int>(sequence % kTagSpace));
  check_mpi(run_->start(), "all-reduce step");
}

bool AllreduceOperation::test() {
  bool done = false;
  check_mpi(run_->advance(done), "all-reduce step");
  return done;
}

}  // namespace dtrain::comm::mpi
