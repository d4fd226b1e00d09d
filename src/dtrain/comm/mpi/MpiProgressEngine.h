// The mpi backend's progress engine: starts a communicator's operations in submission order and
// polls them to completion against its timeout, on the caller's thread for a blocking call with
// nothing queued, on a progress thread otherwise. Internal to comm/mpi.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// LibTorch 1.13's FunctionRef.h uses c10::invoke_result_t without including where it is defined.
#include <c10/util/C++17.h>
#include <c10/util/FunctionRef.h>

#include "dtrain/comm/Work.h"
#include "dtrain/comm/mpi/MpiOperation.h"
#include "dtrain/comm/mpi/MpiRuntime.h"
#include "dtrain/util/Clock.h"

namespace dtrain::comm::mpi {

struct Pending {
  // The operation: a queued one's is owned here (`owned`); a transfer's lives in its Work, beside
  // this record (Note [One allocation per transfer]).
  Operation* op = nullptr;
  std::unique_ptr<Operation> owned;
  bool stepped = false;  // op->stepped(), kept for after op is gone
  util::Clock::time_point deadline;
  std::atomic<bool> done{false};  // set under the engine's mutex; read without it while polling
  std::string error;
};

// Starts operations in submission order and polls them; see Note [MPI ordering and timeouts].
class ProgressEngine : public std::enable_shared_from_this<ProgressEngine> {
 public:
  ProgressEngine(std::shared_ptr<MpiRuntime> runtime, std::chrono::milliseconds timeout,
                 std::chrono::microseconds poll_wait)
      : runtime_(std::move(runtime)), timeout_(timeout), poll_wait_(poll_wait) {}
  ~ProgressEngine();

  // Runs `op`: to completion before returning (async_op = false), or in the background, returning
  // the Work that waits for it. Throws when an earlier failure left the communicator unusable.
  WorkPtr submit(std::unique_ptr<Operation> op, bool async_op);

  // Posts a send or receive now, on the caller's thread, and returns the Work that tests it there:
  // see Note [Point-to-point on the caller's thread]. Throws like submit().
  WorkPtr post_transfer(TransferOperation::Direction direction, const at::Tensor& tensor, int count,
                        MPI_Datatype datatype, int peer, int tag, MPI_Comm comm);

  // Returns once every queued operation has been posted (the progress thread posts them in
  // order), so that a blocking MPI collective called next is started after them on every rank.
  void drain_queued();

  // Waits for everything queued to finish and stops the thread.
  void shutdown();

  std::chrono::microseconds poll_wait() const { return poll_wait_; }

  // Without a lock: a blocking call asks on every call (Note [The cost of a small call] in
  // Communicator.cpp).
  bool broken() const { return broken_flag_.load(std::memory_order_acquire); }

  // Returns once no stepped operation (Operation::stepped) is queued or in flight. See Note
  // [Blocking collectives and the watchdog].
  void drain_stepped();

  // For Work: waits until `pending` is done, throwing its error.
  void wait(const std::shared_ptr<Pending>& pending);
  bool completed(const std::shared_ptr<Pending>& pending);
  // For a transfer of post_transfer(): tests it once on the caller's thread (true: done, or throws
  // its error). `keep` hands out shared ownership of `pending` should it be abandoned.
  bool test_posted(Pending& pending, c10::function_ref<std::shared_ptr<Pending>()> keep);

 private:
  void post(Pending& pending);
  // Tests once; returns true when done (then `error` says whether it failed). An operation that
  // timed out and cannot be withdrawn is kept for ever, through `keep` (MPI may still write into
  // its buffers).
  bool test(Pending& pending, std::string& error, c10::function_ref<std::shared_ptr<Pending>()> keep);
  // With mutex_ held: marks `pending` done with `error` (empty: success) and wakes its waiters.
  void finish_locked(Pending& pending, std::string error);
  std::string timeout_message() const;
  // When an operation started now times out.
  util::Clock::time_point deadline() const;
  void run();
  // The progress thread's two halves: post what was queued (with mutex_ held) into `active`, and
  // test what is active, returning whether anything finished.
  void post_queued_locked(std::vector<std::shared_ptr<Pending>>& active);
  bool test_active(std::vector<std::shared_ptr<Pending>>& active);

  std::shared_ptr<MpiRuntime> runtime_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds poll_wait_;
  std::atomic<int> stepped_outstanding_{0};  // stepped operations queued or in flight
  // queue_.size(), lowered only once the operation has been posted: drain_queued() reads it
  // without the lock.
  std::atomic<std::size_t> queued_{0};
  std::atomic<bool> broken_flag_{false};  // !broken_.empty(), set after broken_
  std::mutex mutex_;                      // guards everything below; taken before the MPI mutex
  std::condition_variable wake_;          // the progress thread: work queued or stop
  std::condition_variable finished_;      // waiters: some operation finished
  std::deque<std::shared_ptr<Pending>> queue_;
  std::vector<std::shared_ptr<Pending>> abandoned_;
  std::uint64_t collective_sequence_ = 0;
  std::string broken_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dtrain::comm::mpi
