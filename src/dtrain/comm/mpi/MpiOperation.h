// The operations the mpi backend's progress engine posts and polls: a single non-blocking MPI
// call, or the all-reduce as a polled step list. Internal to comm/mpi.
#pragma once

#include <ATen/core/Tensor.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "dtrain/comm/mpi/MpiAllreduce.h"

namespace dtrain::comm::mpi {

// Throws std::runtime_error naming the call and MPI's message unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);
// The tensor's element count as MPI's int; throws std::invalid_argument saying how to split a
// larger tensor.
int checked_count(const at::Tensor& t);

// One communication: posted once, then tested until done. post, test and cancel are called with
// the runtime's MPI mutex held; on_done runs without it once the data is in place.
class Operation {
 public:
  virtual ~Operation() = default;
  // sequence: the number of collectives this communicator posted before, the same on every rank
  // (point-to-point operations differ between ranks and are not counted).
  virtual void post(std::uint64_t sequence) = 0;
  virtual bool collective() const { return true; }
  // Advanced by our own test() calls step by step, not by MPI's progress alone (the all-reduce).
  virtual bool stepped() const { return false; }
  virtual bool test() = 0;
  // After a timeout: withdraws what is still posted; false when that is impossible.
  virtual bool cancel() { return false; }

  std::function<void()> on_done;
};

// A single non-blocking MPI call (a collective).
class RequestOperation final : public Operation {
 public:
  using Start = std::function<int(MPI_Request*)>;
  RequestOperation(const char* call, Start start) : call_(call), start_(std::move(start)) {}

  void post(std::uint64_t) override { check_mpi(start_(&request_), call_); }
  bool test() override;

 private:
  const char* call_;
  Start start_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// A send (MPI_Isend) or a receive (MPI_Irecv) of a whole tensor. Its own class rather than a
// RequestOperation: a std::function holding these arguments costs a heap allocation per transfer
// (Note [The cost of a small call] in Communicator.cpp). A receive checks that the message filled
// the tensor, and can be withdrawn after a timeout.
class TransferOperation final : public Operation {
 public:
  enum class Direction { Send, Receive };
  TransferOperation(Direction direction, at::Tensor tensor, int count, MPI_Datatype datatype, int peer,
                    int tag, MPI_Comm comm)
      : direction_(direction),
        tensor_(std::move(tensor)),
        count_(count),
        datatype_(datatype),
        peer_(peer),
        tag_(tag),
        comm_(comm) {}

  bool collective() const override { return false; }
  void post(std::uint64_t) override;
  bool test() override;
  bool cancel() override;

 private:
  const char* call() const { return direction_ == Direction::Send ? "MPI_Isend" : "MPI_Irecv"; }

  Direction direction_;
  at::Tensor tensor_;
  int count_;
  MPI_Datatype datatype_;
  int peer_;
  int tag_;
  MPI_Comm comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The all-reduce as a polled step list (see MpiAllreduce.h for why not MPI_Iallreduce).
class AllreduceOperation final : public Operation {
 public:
  AllreduceOperation(at::Tensor tensor, MPI_Datatype datatype, MPI_Op op, int rank, int size, MPI_Comm comm)
      : tensor_(std::move(tensor)), datatype_(datatype), op_(op), rank_(rank), size_(size), comm_(comm) {}

  void post(std::uint64_t sequence) override;
  bool stepped() const override { return true; }
  bool test() override;

 private:
  at::Tensor tensor_;
  std::unique_ptr<char[]> scratch_;
  MPI_Datatype datatype_;
  MPI_Op op_;
  int rank_;
  int size_;
  MPI_Comm comm_;
  std::optional<AllreduceRun> run_;
};

}  // namespace dtrain::comm::mpi
