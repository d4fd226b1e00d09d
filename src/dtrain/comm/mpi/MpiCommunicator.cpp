// The mpi backend: every operation is a non-blocking MPI call (or a polled step list, for the
// asynchronous all-reduce) started in submission order and polled to completion against the
// communicator's timeout, by the caller for a blocking call with nothing queued, by a progress
// thread otherwise. A blocking all-reduce is MPI_Allreduce under a watchdog (Note [Blocking
// collectives and the watchdog]).
#include "dtrain/comm/mpi/MpiCommunicator.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "dtrain/comm/mpi/MpiAllreduce.h"
#include "dtrain/comm/mpi/MpiRuntime.h"

namespace dtrain::comm {
namespace {

using mpi::MpiRuntime;
using Clock = std::chrono::steady_clock;

// Below this size the all-reduce is latency-bound and recursive doubling (log2 n rounds of the
// whole buffer) wins; above it the ring (2(n-1) rounds of 1/n of it) moves fewer bytes per rank.
constexpr std::size_t kRingThresholdBytes = 64 * 1024;
// Internal all-reduce messages are tagged by their sequence number; MPI guarantees tags up to 32767.
constexpr std::uint64_t kTagSpace = 32768;

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS)
    throw std::runtime_error(fmt::format("{} failed: {}", call, mpi::mpi_error_string(rc)));
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

// A single non-blocking MPI call.
class RequestOperation final : public Operation {
 public:
  using Start = std::function<int(MPI_Request*)>;
  RequestOperation(const char* call, Start start, bool collective = true)
      : call_(call), start_(std::move(start)), collective_(collective) {}

  bool collective() const override { return collective_; }

  // A receive checks that the message filled the tensor, and can be withdrawn after a timeout.
  void expect_receive(MPI_Datatype datatype, int count) {
    receive_ = true;
    datatype_ = datatype;
    count_ = count;
  }

  void post(std::uint64_t) override { check_mpi(start_(&request_), call_); }

  bool test() override {
    int done = 0;
    MPI_Status status;
    check_mpi(MPI_Test(&request_, &done, &status), call_);
    if (done && receive_) {
      int received = 0;
      MPI_Get_count(&status, datatype_, &received);
      if (received != count_) {
        throw std::runtime_error(
            fmt::format("received {} elements from rank {} (tag {}); the tensor holds {}", received,
                        status.MPI_SOURCE, status.MPI_TAG, count_));
      }
    }
    return done != 0;
  }

  bool cancel() override {
    if (!receive_) return false;
    // Cancelling a receive completes locally, so this wait returns at once.
    MPI_Cancel(&request_);
    MPI_Wait(&request_, MPI_STATUS_IGNORE);
    return true;
  }

 private:
  const char* call_;
  Start start_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool collective_;
  bool receive_ = false;
  MPI_Datatype datatype_ = MPI_DATATYPE_NULL;
  int count_ = 0;
};

// The all-reduce as a polled step list (see MpiAllreduce.h for why not MPI_Iallreduce).
class AllreduceOperation final : public Operation {
 public:
  AllreduceOperation(at::Tensor tensor, MPI_Datatype datatype, MPI_Op op, int rank, int size, MPI_Comm comm)
      : tensor_(std::move(tensor)), datatype_(datatype), op_(op), rank_(rank), size_(size), comm_(comm) {}

  void post(std::uint64_t sequence) override {
    const auto count = static_cast<std::size_t>(tensor_.numel());
    const std::size_t bytes = count * tensor_.element_size();
    auto steps = bytes >= kRingThresholdBytes && count >= static_cast<std::size_t>(size_)
                     ? mpi::ring_steps(rank_, size_, count)
                     : mpi::recursive_doubling_steps(rank_, size_, count);
    // Uninitialised, unlike std::vector: zeroing megabytes per call would cost as much as the copy.
    // Plain new[] rather than at::empty: at 4 KB the dispatcher's cost shows in the latency.
    scratch_.reset(new char[mpi::scratch_elements(steps) * tensor_.element_size()]);
    run_.emplace(std::move(steps), tensor_.data_ptr(), scratch_.get(), datatype_, op_, comm_,
                 static_cast<int>(sequence % kTagSpace));
    check_mpi(run_->start(), "all-reduce step");
  }

  bool stepped() const override { return true; }

  bool test() override {
    bool done = false;
    check_mpi(run_->advance(done), "all-reduce step");
    return done;
  }

 private:
  at::Tensor tensor_;
  std::unique_ptr<char[]> scratch_;
  MPI_Datatype datatype_;
  MPI_Op op_;
  int rank_;
  int size_;
  MPI_Comm comm_;
  std::optional<mpi::AllreduceRun> run_;
};

struct Pending {
  std::unique_ptr<Operation> op;
  bool stepped = false;  // op->stepped(), kept for after op is gone
  Clock::time_point deadline;
  std::atomic<bool> done{false};  // set under the engine's mutex; read without it while polling
  std::string error;
};

// Starts operations in submission order and polls them; see Note [MPI ordering and timeouts].
class ProgressEngine : public std::enable_shared_from_this<ProgressEngine> {
 public:
  ProgressEngine(std::shared_ptr<MpiRuntime> runtime, std::chrono::milliseconds timeout,
                 std::chrono::microseconds poll_wait)
      : runtime_(std::move(runtime)), timeout_(timeout), poll_wait_(poll_wait) {}

  ~ProgressEngine() {
    // An abandoned operation is still posted: MPI may yet write into its buffers, so it is never
    // freed. The process is expected to exit (CommError) and MPI_Finalize is skipped.
    for (auto& pending : abandoned_) pending->op.release();
  }

  WorkPtr submit(std::unique_ptr<Operation> op, bool async_op);

  // Waits for everything queued to finish and stops the thread.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  bool broken() {
    std::lock_guard<std::mutex> lock(mutex_);
    return !broken_.empty();
  }

  // Returns once no stepped operation (Operation::stepped) is queued or in flight. See Note
  // [Blocking collectives and the watchdog].
  void drain_stepped() {
    Backoff backoff;
    while (stepped_outstanding_.load(std::memory_order_acquire) > 0) backoff.idle();
  }

  // For Work: waits until `pending` is done, throwing its error.
  void wait(const std::shared_ptr<Pending>& pending);
  bool completed(const std::shared_ptr<Pending>& pending);

 private:
  void post(Pending& pending);
  // Tests once; returns true when done (then `error` says whether it failed).
  bool test(const std::shared_ptr<Pending>& pending, std::string& error);
  std::string timeout_message() const {
    return fmt::format("timed out after {} s; a peer may have died or not called this operation",
                       std::chrono::duration<double>(timeout_).count());
  }
  void run();

  std::shared_ptr<MpiRuntime> runtime_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds poll_wait_;
  std::atomic<int> stepped_outstanding_{0};  // stepped operations queued or in flight
  std::mutex mutex_;                         // guards everything below; taken before the MPI mutex
  std::condition_variable wake_;             // the progress thread: work queued or stop
  std::condition_variable finished_;         // waiters: some operation finished
  std::deque<std::shared_ptr<Pending>> queue_;
  std::vector<std::shared_ptr<Pending>> abandoned_;
  std::uint64_t collective_sequence_ = 0;
  std::string broken_;
  bool stop_ = false;
  std::thread thread_;
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<ProgressEngine> engine, std::shared_ptr<Pending> pending)
      : engine_(std::move(engine)), pending_(std::move(pending)) {}
  bool completed() override { return engine_->completed(pending_); }
  void wait() override { engine_->wait(pending_); }

 private:
  std::shared_ptr<ProgressEngine> engine_;
  std::shared_ptr<Pending> pending_;
};

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

bool ProgressEngine::test(const std::shared_ptr<Pending>& pending, std::string& error) {
  try {
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    if (pending->op->test()) return true;
  } catch (const std::exception& e) {
    error = e.what();
    return true;
  }
  if (Clock::now() < pending->deadline) return false;
  error = timeout_message();
  bool withdrawn = false;
  {
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    withdrawn = pending->op->cancel();
  }
  if (!withdrawn) {
    runtime_->mark_unfinalizable();
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.empty()) broken_ = error;
    abandoned_.push_back(pending);
  }
  return true;
}

WorkPtr ProgressEngine::submit(std::unique_ptr<Operation> op, bool async_op) {
  auto pending = std::make_shared<Pending>();
  pending->op = std::move(op);
  pending->deadline = Clock::now() + timeout_;
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
    while (!test(pending, error)) backoff.idle();
    if (!error.empty()) throw std::runtime_error(error);
    if (pending->op->on_done) pending->op->on_done();
    return completed_work();
  }
  pending->stepped = pending->op->stepped();
  if (pending->stepped) stepped_outstanding_.fetch_add(1, std::memory_order_acq_rel);
  queue_.push_back(pending);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  lock.unlock();
  wake_.notify_one();
  return std::make_shared<MpiWork>(shared_from_this(), pending);
}

void ProgressEngine::run() {
  std::vector<std::shared_ptr<Pending>> active;
  Backoff backoff;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (active.empty()) wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty() && active.empty()) return;
      while (!queue_.empty()) {
        auto pending = std::move(queue_.front());
        queue_.pop_front();
        try {
          post(*pending);
          active.push_back(std::move(pending));
        } catch (const std::exception& e) {
          pending->error = e.what();
          pending->done = true;
          if (pending->stepped) stepped_outstanding_.fetch_sub(1, std::memory_order_acq_rel);
          finished_.notify_all();
        }
      }
    }
    bool progressed = false;
    for (std::size_t i = 0; i < active.size();) {
      std::string error;
      if (!test(active[i], error)) {
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
      pending->error = std::move(error);
      pending->done = true;
      if (pending->stepped) stepped_outstanding_.fetch_sub(1, std::memory_order_acq_rel);
      finished_.notify_all();
    }
    if (progressed) {
      backoff.reset();
    } else if (!active.empty()) {
      backoff.idle();
    }
  }
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

// Note [Blocking collectives and the watchdog]
// A blocking all-reduce calls MPI_Allreduce itself: OpenMPI's shared-memory collective is several
// times faster at small sizes than anything polled from outside (bench/RESULTS.md: 4 KB, 1.4 us
// against 4.3 us). Blocking and non-blocking collectives never match each other in MPI, so every
// rank takes this path for the same call. Such a call cannot be given up, so a watchdog thread
// checks it against the communicator's timeout and, when a peer never arrives, prints the error
// naming rank, operation and size and ends the process with exit code 1, upon which mpirun stops
// the job: PyTorch's NCCL watchdog does the same. Before the call, the caller waits until no
// stepped operation (our own polled all-reduce, advanced by the progress thread) is outstanding:
// the call holds the MPI lock, and a peer may be waiting for the next step of one of those before
// it reaches this collective.
class Watchdog {
 public:
  Watchdog(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches the blocking call that starts now; disarm() when it returns.
  void arm(const char* op, std::int64_t bytes) {
    std::call_once(started_, [this] { thread_ = std::thread([this] { run(); }); });
    op_.store(op, std::memory_order_relaxed);
    bytes_.store(bytes, std::memory_order_relaxed);
    armed_at_.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
  }
  void disarm() { armed_at_.store(0, std::memory_order_release); }

 private:
  void run() {
    const auto period = std::clamp<std::chrono::milliseconds>(timeout_ / 8, std::chrono::milliseconds(10),
                                                              std::chrono::milliseconds(1000));
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
      const auto at = armed_at_.load(std::memory_order_acquire);
      if (at == 0 || Clock::now() - Clock::time_point(Clock::duration(at)) < timeout_) continue;
      std::fprintf(
          stderr,
          "[rank %d/%d] %s (%lld bytes, mpi): timed out after %g s; a peer may have died or not called "
          "this operation. A blocking MPI collective cannot be withdrawn, so this process exits with "
          "code 1 and mpirun stops the job\n",
          rank_, size_, op_.load(std::memory_order_relaxed),
          static_cast<long long>(bytes_.load(std::memory_order_relaxed)),
          std::chrono::duration<double>(timeout_).count());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::atomic<Clock::rep> armed_at_{0};  // 0: nothing watched
  std::atomic<const char*> op_{""};
  std::atomic<std::int64_t> bytes_{0};
  std::once_flag started_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (used for collectives) and duplicates it for point-to-point traffic,
  // so that user tags never meet the all-reduce's internal messages.
  MpiCommunicator(std::shared_ptr<MpiRuntime> runtime, MPI_Comm comm, int rank, int size,
                  std::chrono::milliseconds timeout, std::chrono::microseconds poll_wait)
      : Communicator(rank, size, timeout),
        runtime_(runtime),
        collective_comm_(comm),
        poll_wait_(poll_wait),
        engine_(std::make_shared<ProgressEngine>(runtime, timeout, poll_wait)),
        watchdog_(rank, size, timeout) {
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    MPI_Comm_set_errhandler(collective_comm_, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_dup(collective_comm_, &p2p_comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(p2p_comm_, MPI_ERRORS_RETURN);
    int flag = 0;
    int* tag_ub = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    tag_ub_ = flag && tag_ub ? *tag_ub : 32767;
  }

  ~MpiCommunicator() override {
    engine_->shutdown();
    if (engine_->broken()) return;  // operations are still posted on these communicators
    std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
    MPI_Comm_free(&p2p_comm_);
    MPI_Comm_free(&collective_comm_);
  }

  std::string backend() const override { return "mpi"; }

 protected:
  WorkPtr do_allreduce(at::Tensor& tensor, ReduceOp op, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(tensor.scalar_type());
    const MPI_Op mpi_op = runtime_->op(op, tensor.scalar_type());
    const int count = checked_count(tensor);
    if (!async_op) {
      // See Note [Blocking collectives and the watchdog].
      engine_->drain_stepped();
      if (engine_->broken()) {
        throw std::runtime_error(
            "the communicator is unusable after an earlier failure; the process should exit");
      }
      int rc = MPI_SUCCESS;
      {
        std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
        watchdog_.arm("allreduce", static_cast<std::int64_t>(tensor.nbytes()));
        rc = MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count, datatype, mpi_op, collective_comm_);
        watchdog_.disarm();
      }
      check_mpi(rc, "MPI_Allreduce");
      if (op == ReduceOp::Avg) tensor.div_(size());
      return completed_work();
    }
    auto operation =
        std::make_unique<AllreduceOperation>(tensor, datatype, mpi_op, rank(), size(), collective_comm_);
    if (op == ReduceOp::Avg) operation->on_done = divide_by_size(tensor);
    return submit(std::move(operation), async_op);
  }

  WorkPtr do_allgather(at::Tensor& input, at::Tensor& output, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(input.scalar_type());
    const int count = checked_count(input);
    checked_count(output);
    return submit(std::make_unique<RequestOperation>("MPI_Iallgather",
                                                     [=, comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Iallgather(input.data_ptr(), count,
                                                                             datatype, output.data_ptr(),
                                                                             count, datatype, comm, request);
                                                     }),
                  async_op);
  }

  WorkPtr do_broadcast(at::Tensor& tensor, int root, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(tensor.scalar_type());
    const int count = checked_count(tensor);
    return submit(std::make_unique<RequestOperation>("MPI_Ibcast",
                                                     [=, comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Ibcast(tensor.data_ptr(), count, datatype,
                                                                         root, comm, request);
                                                     }),
                  async_op);
  }

  WorkPtr do_reduce_scatter(at::Tensor& input, at::Tensor& output, ReduceOp op, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(input.scalar_type());
    const MPI_Op mpi_op = runtime_->op(op, input.scalar_type());
    checked_count(input);
    const int count = checked_count(output);
    auto operation = std::make_unique<RequestOperation>(
        "MPI_Ireduce_scatter_block", [=, comm = collective_comm_](MPI_Request* request) {
          return MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), count, datatype, mpi_op, comm,
                                           request);
        });
    if (op == ReduceOp::Avg) operation->on_done = divide_by_size(output);
    return submit(std::move(operation), async_op);
  }

  WorkPtr do_alltoall(at::Tensor& input, at::Tensor& output, bool async_op) override {
    const MPI_Datatype datatype = runtime_->datatype(input.scalar_type());
    const int chunk = checked_count(input) / size();
    return submit(std::make_unique<RequestOperation>("MPI_Ialltoall",
                                                     [=, comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Ialltoall(input.data_ptr(), chunk, datatype,
                                                                            output.data_ptr(), chunk,
                                                                            datatype, comm, request);
                                                     }),
                  async_op);
  }

  WorkPtr do_send(at::Tensor& tensor, int dst, int tag, bool async_op) override {
    check_tag(tag);
    const MPI_Datatype datatype = runtime_->datatype(tensor.scalar_type());
    const int count = checked_count(tensor);
    return submit(std::make_unique<RequestOperation>(
                      "MPI_Isend",
                      [=, comm = p2p_comm_](MPI_Request* request) {
                        return MPI_Isend(tensor.data_ptr(), count, datatype, dst, tag, comm, request);
                      },
                      /*collective=*/false),
                  async_op);
  }

  WorkPtr do_recv(at::Tensor& tensor, int src, int tag, bool async_op) override {
    check_tag(tag);
    const MPI_Datatype datatype = runtime_->datatype(tensor.scalar_type());
    const int count = checked_count(tensor);
    auto operation = std::make_unique<RequestOperation>(
        "MPI_Irecv",
        [=, comm = p2p_comm_](MPI_Request* request) {
          return MPI_Irecv(tensor.data_ptr(), count, datatype, src, tag, comm, request);
        },
        /*collective=*/false);
    operation->expect_receive(datatype, count);
    return submit(std::move(operation), async_op);
  }

  WorkPtr do_barrier(bool async_op) override {
    return submit(std::make_unique<RequestOperation>("MPI_Ibarrier",
                                                     [comm = collective_comm_](MPI_Request* request) {
                                                       return MPI_Ibarrier(comm, request);
                                                     }),
                  async_op);
  }

  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override {
    // MPI_Comm_split blocks without a timeout; a barrier first, ordered after this rank's queued
    // work, fails within the timeout when a peer is absent.
    do_barrier(false)->wait();
    int position = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == rank()) position = static_cast<int>(i);
    }
    MPI_Comm sub = MPI_COMM_NULL;
    {
      std::lock_guard<std::mutex> mpi_lock(runtime_->mutex());
      check_mpi(MPI_Comm_split(collective_comm_, position >= 0 ? 0 : MPI_UNDEFINED, position, &sub),
                "MPI_Comm_split");
    }
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(runtime_, sub, position, static_cast<int>(ranks.size()),
                                             timeout(), poll_wait_);
  }

 private:
  WorkPtr submit(std::unique_ptr<Operation> operation, bool async_op) {
    return engine_->submit(std::move(operation), async_op);
  }

  std::function<void()> divide_by_size(at::Tensor tensor) const {
    return [tensor, n = size()]() mutable { tensor.div_(n); };
  }

  void check_tag(int tag) const {
    if (tag < 0 || tag > tag_ub_) {
      throw std::invalid_argument(fmt::format("tag {} is outside MPI's range [0, {}]", tag, tag_ub_));
    }
  }

  std::shared_ptr<MpiRuntime> runtime_;
  MPI_Comm collective_comm_;
  std::chrono::microseconds poll_wait_;
  MPI_Comm p2p_comm_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;
  std::shared_ptr<ProgressEngine> engine_;
  Watchdog watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> connect_mpi(const BackendOptions& options, const RendezvousInfo& rendezvous) {
  auto runtime = MpiRuntime::acquire();
  int rank = 0;
  int size = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> mpi_lock(runtime->mutex());
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    // A rendezvous resolved from somewhere (options, torchrun, Slurm) must describe the same job
    // that mpirun started; the default one carries no claim.
    if (rendezvous.source != "default" && (rendezvous.world_size != size || rendezvous.rank != rank)) {
      throw std::invalid_argument(fmt::format(
          "the mpi backend found rank {} of world size {} in MPI_COMM_WORLD, but the rendezvous ({}) says "
          "rank {} "
          "of world size {}; start the job with `mpirun -n {}` or make the rank/world-size options and "
          "environment agree with mpirun",
          rank, size, rendezvous.source, rendezvous.rank, rendezvous.world_size, rendezvous.world_size));
    }
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  }
  return std::make_unique<MpiCommunicator>(runtime, comm, rank, size, options.timeout, options.poll_wait);
}

}  // namespace dtrain::comm
