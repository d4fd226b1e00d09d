// The mpi backend's progress engine: the queue, the progress thread, and the Work it hands out.
#include "dtrain/comm/mpi/MpiProgressEngine.h"

#include <fmt/format.h>
#include <sched.h>

#include <stdexcept>

namespace dtrain::comm::mpi {

namespace {

using util::Clock;

// Note [Polling]
// OpenMPI makes progress only inside MPI calls (ompi_info: "OMPI progress: no"), so whoever waits
// must keep calling MPI_Test. Spinning gives the lowest latency, but when ranks oversubscribe the
// cores a spinning rank steals the core its peer needs, so after a short spin the poller yields
// the core between tests, and once a wait has lasted long enough that it is clearly waiting for a
// late peer rather than for bytes, it sleeps briefly between tests.
class Backoff {
 public:
  void reset() { polls_ = 0; }
  void idle() {
    if (polls_ == 0) since_ = Clock::now();
    ++polls_;
    if (polls_ < kSpinPolls) return;
    if (Clock::now() - since_ < kYieldPeriod) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }

 private:
  static constexpr int kSpinPolls = 100;
  static constexpr std::chrono::microseconds kYieldPeriod{200};
  static constexpr std::chrono::microseconds kSleep{50};
  int polls_ = 0;
  Clock::time_point since_;
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<ProgressEngine> engine, std::shared_ptr<Pending> pending)
      : engine_(std::move(engine)), pending_(std::move(pending)) {}
  bool completed() override { return engine_->completed(pending_); }
  void wait() override { engine_->wait(pending_); }
  bool poll() override { return completed(); }

 private:
  std::shared_ptr<ProgressEngine> engine_;
  std::shared_ptr<Pending> pending_;
};

// Note [Point-to-point on the caller's thread]
// Queued for the progress thread, which would post it and test it while the caller waited for the
// progress thread to say so, an asynchronous send or recv would cost two thread hand-offs per
// transfer, each a wake-up that costs up to a scheduler tick (4 ms) on busy cores. A
// point-to-point operation needs no ordering against collectives (it runs on its own duplicate of
// the communicator) and none against other transfers but its own posting order, so it is posted
// at once on the caller's thread, as MPI_Isend and MPI_Irecv would be, and its Work tests it
// there: wait() polls it as the blocking path does, completed() tests it once. OpenMPI advances
// every posted request inside any MPI call of the process (the progress thread's tests of other
// operations, a blocking collective, another Work's test), so a transfer nobody waits for still
// moves while others are waited for; one posted alone moves when it is tested.
//
// Note [One allocation per transfer]
// A transfer's Work holds its operation and its Pending record as members, one allocation where
// there were three (measured: at 4 KB each heap allocation and release is a few percent of a
// send/recv pair between two ranks of one host). Should a transfer time out and stay posted, its
// Work keeps the engine alive and the engine keeps the Work (ProgressEngine::abandoned_): a cycle
// that is never freed, on purpose, since MPI may still write into the tensor.
class PostedWork final : public Work, public std::enable_shared_from_this<PostedWork> {
  static constexpr int kSpinTests = 100;

 public:
  PostedWork(std::shared_ptr<ProgressEngine> engine, TransferOperation::Direction direction,
             const at::Tensor& tensor, int count, MPI_Datatype datatype, int peer, int tag, MPI_Comm comm)
      : engine_(std::move(engine)), op_(direction, tensor, count, datatype, peer, tag, comm) {
    pending_.op = &op_;
  }
  Pending& pending() { return pending_; }
  bool completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return test();
  }
  bool poll() override { return completed(); }
  void wait() override {
    std::lock_guard<std::mutex> lock(mutex_);
    // Tests back to back, first spinning (a small message lands within microseconds, and a
    // sched_yield() costs about as much), then yielding the core between tests, for the poll
    // budget: a large transfer advances only inside MPI calls, so the Backoff's sleeps (meant for a
    // late peer) would stall it (measured: 16 MB sendrecv 2.0x MPI_Waitall with them). After the
    // budget, the Backoff.
    for (int spin = 0; spin < kSpinTests; ++spin) {
      if (test()) return;
    }
    const auto until = Clock::now() + engine_->poll_wait();
    while (Clock::now() < until) {
      if (test()) return;
      sched_yield();
    }
    Backoff backoff;
    while (!test()) backoff.idle();
  }

 private:
  bool test() {
    return engine_->test_posted(pending_,
                                [this] { return std::shared_ptr<Pending>(shared_from_this(), &pending_); });
  }

  std::shared_ptr<ProgressEngine> engine_;
  TransferOperation op_;
  Pending pending_;
  std::mutex mutex_;  // one test at a time: a finished request must not be tested again
};

}  // namespace

WorkPtr ProgressEngine::post_transfer(TransferOperation::Direction direction, const at::Tensor& tensor,
                                      int count, MPI_Datatype datatype, int peer, int tag, MPI_Comm comm) {
  if (broken()) {
    std::lock_guard<std::mutex> lock(mutex_);
    throw std::runtime_error("the communicator is unusable after an earlier failure (" + broken_ +
                             "); the process should exit");
  }
  auto work =
      std::make_shared<PostedWork>(shared_from_this(), direction, tensor, count, datatype, peer, tag, comm);
  work->pending().deadline = deadline();
  post(work->pending());
  return work;
}

bool ProgressEngine::test_posted(Pending& pending, c10::function_ref<std::shared_ptr<Pending>()> keep) {
  if (!pending.done.load(std::memory_order_acquire)) {
    std::string error;
    if (!test(pending, error, keep)) return false;
    if (error.empty() && pending.op->on_done) pending.op->on_done();
    pending.error = std::move(error);
    pending.done.store(true, std::memory_order_release);
  }
  if (!pending.error.empty()) throw std::runtime_error(pending.error);
  return true;
}

void ProgressEngine::drain_queued() {
  Backoff backoff;
  while (queued_.load(std::memory_order_acquire) > 0) backoff.idle();
}

ProgressEngine::~ProgressEngine() {
  // An abandoned operation is still posted: MPI may yet write into its buffers, so it is never
  // freed. The process is expected to exit (CommError) and MPI_Finalize is skipped.
  for (auto& pending : abandoned_) pending->owned.release();
}

void ProgressEngine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressEngine::drain_stepped() {
  Backoff backoff;
  while (stepped_outstanding_.load(std::memory_order_acquire) > 0) backoff.idle();
}

Clock::time_point ProgressEngine::deadline() const {
  // The coarse clock: read for every operation, and again on every unsuccessful test (Note [The
  // cost of a small call] in Communicator.cpp); its lag is added, so an operation never fails
  // before its timeout.
  return util::coarse_now() + timeout_ + util::coarse_resolution();
}

std::string ProgressEngine::timeout_message() const {
  return fmt::format("timed out after {} s; a peer may have died or not called this operation",
                     std::chrono::duration<double>(timeout_).count());
}

// Note [MPI ordering and timeouts]
// Every rank must start collectives on a communicator in the same order, so operations are posted
// under mutex_ in submission order, collectives numbered by collective_sequence_. A blocking call finding the
// queue empty posts its operation itself and polls it on the caller's thread (no hand-off to the progress
// thread on the latency path); operations posted earlier may still be in flight on the progress
// thread, which is fine: MPI matches by posting order, not completion order. Everything is
// non-blocking, so a wait can give up at the deadline. A timed-out receive is cancelled and the
// communicator stays usable; anything else cannot be withdrawn, so the communicator refuses further
// work and the process must not call MPI_Finalize (see Note [MPI lifetime]).
void ProgressEngine::post(Pending& pending) {
  std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
  pending.op->post(collective_sequence_);
  if (pending.op->collective()) ++collective_sequence_;
}

bool ProgressEngine::test(Pending& pending, std::string& error,
                          c10::function_ref<std::shared_ptr<Pending>()> keep) {
  try {
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    if (pending.op->test()) return true;
  } catch (const std::exception& e) {
    error = e.what();
    return true;
  }
  if (util::coarse_now() < pending.deadline) return false;
  error = timeout_message();
  bool withdrawn = false;
  {
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    withdrawn = pending.op->cancel();
  }
  if (!withdrawn) {
    runtime_->mark_unfinalizable();
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_ = error;
    broken_flag_.store(true, std::memory_order_release);
    abandoned_.push_back(keep());
  }
  return true;
}

WorkPtr ProgressEngine::submit(std::unique_ptr<Operation> op, bool async_op) {
  auto pending = std::make_shared<Pending>();
  pending->owned = std::move(op);
  pending->op = pending->owned.get();
  pending->deadline = deadline();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!broken_.empty()) {
    throw std::runtime_error("the communicator is unusable after an earlier failure (" + broken_ +
                             "); the process should exit");
  }
  if (!async_op && queue_.empty()) {
    post(*pending);
    lock.unlock();
    Backoff backoff;
    std::string error;
    while (!test(*pending, error, [&] { return pending; })) backoff.idle();
    if (!error.empty()) throw std::runtime_error(error);
    if (pending->op->on_done) pending->op->on_done();
    return completed_work();
  }
  pending->stepped = pending->op->stepped();
  if (pending->stepped) stepped_outstanding_.fetch_add(1, std::memory_order_acq_rel);
  queue_.push_back(pending);
  queued_.fetch_add(1, std::memory_order_acq_rel);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  lock.unlock();
  wake_.notify_one();
  return std::make_shared<MpiWork>(shared_from_this(), pending);
}

void ProgressEngine::finish_locked(Pending& pending, std::string error) {
  pending.error = std::move(error);
  pending.done = true;
  if (pending.stepped) stepped_outstanding_.fetch_sub(1, std::memory_order_acq_rel);
  finished_.notify_all();
}

void ProgressEngine::run() {
  std::vector<std::shared_ptr<Pending>> active;
  Backoff backoff;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (active.empty()) wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty() && active.empty()) return;
      post_queued_locked(active);
    }
    if (test_active(active)) {
      backoff.reset();
    } else if (!active.empty()) {
      backoff.idle();
    }
  }
}

void ProgressEngine::post_queued_locked(std::vector<std::shared_ptr<Pending>>& active) {
  while (!queue_.empty()) {
    auto pending = std::move(queue_.front());
    queue_.pop_front();
    try {
      post(*pending);
      active.push_back(std::move(pending));
    } catch (const std::exception& e) {
      finish_locked(*pending, e.what());
    }
    // After the post: drain_queued() returns on zero, and then this operation must be posted.
    queued_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

bool ProgressEngine::test_active(std::vector<std::shared_ptr<Pending>>& active) {
  bool progressed = false;
  for (std::size_t i = 0; i < active.size();) {
    std::string error;
    if (!test(*active[i], error, [&] { return active[i]; })) {
      ++i;
      continue;
    }
    auto pending = std::move(active[i]);
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
    progressed = true;
    if (error.empty() && pending->op->on_done) {
      try {
        pending->op->on_done();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    finish_locked(*pending, std::move(error));
  }
  return progressed;
}

void ProgressEngine::wait(const std::shared_ptr<Pending>& pending) {
  // Polling first, as C10dWork does (Note [Polling before blocking] in C10dCommunicator.cpp): the
  // progress thread finishing the operation then needs no wake-up of this thread.
  if (poll_wait_.count() > 0 && !pending->done.load(std::memory_order_acquire)) {
    const auto until = Clock::now() + poll_wait_;
    while (!pending->done.load(std::memory_order_acquire) && Clock::now() < until) sched_yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // The progress thread fails the operation at its deadline; the margin only guards against a
  // progress thread that is itself stuck.
  const auto give_up = pending->deadline + std::chrono::seconds(1) + timeout_ / 10;
  if (!finished_.wait_until(lock, give_up, [&] { return pending->done.load(); }))
    throw std::runtime_error(timeout_message());
  if (!pending->error.empty()) throw std::runtime_error(pending->error);
}

bool ProgressEngine::completed(const std::shared_ptr<Pending>& pending) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending->done && !pending->error.empty()) throw std::runtime_error(pending->error);
  return pending->done;
}

}  // namespace dtrain::comm::mpi
