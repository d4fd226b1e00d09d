// Work: the handle of an asynchronous communication operation, and CommError, the error every
// failed or timed-out operation raises, naming the rank and the operation.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

namespace dtrain::comm {

// A failed communication: a peer that died, a timeout, a size mismatch. what() reads
// "[rank 1/4] allreduce (4096 bytes, gloo): <cause>".
class CommError : public std::runtime_error {
 public:
  CommError(int rank, int size, std::string op, const std::string& detail);
  int rank() const { return rank_; }
  const std::string& op() const { return op_; }

 private:
  int rank_;
  std::string op_;
};

class Work {
 public:
  virtual ~Work() = default;
  // True once the operation has finished; throws CommError if it failed.
  virtual bool completed() = 0;
  // Blocks until the operation finished; throws CommError if it failed or took longer than the
  // communicator's timeout.
  virtual void wait() = 0;
  // True if the operation has finished, found by one test that neither blocks nor sets anything in
  // motion (completed() may: c10d Gloo's send starts a thread), and after which wait() need not be
  // called (c10d's wait() also orders CUDA streams). False when a backend cannot tell that
  // cheaply, which is the default. Throws CommError if the operation failed. Lets a wait on what
  // already finished skip the clock reads that time it (Note [The cost of a small call]).
  virtual bool poll() { return false; }
};
using WorkPtr = std::shared_ptr<Work>;

// A Work that is already finished (operations run inline, world size 1).
class CompletedWork final : public Work {
 public:
  bool completed() override { return true; }
  void wait() override {}
  bool poll() override { return true; }
};

// One shared CompletedWork: finished operations need not allocate a handle each. The handle owns
// nothing (its use_count() is 0), so copying it costs no atomic update.
WorkPtr completed_work();

}  // namespace dtrain::comm
