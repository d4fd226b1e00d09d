// The communicator's core: errors, the Work handles that time and record each call, tensors staged
// through host memory, the failure report of a timed-out call, and track(), through which every
// call reaches the backend. The collectives themselves are in CommunicatorCollectives.cpp.
#include "dtrain/comm/Communicator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "dtrain/util/Clock.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::comm {

CommError::CommError(int rank, int size, std::string op, const std::string& detail)
    : std::runtime_error(fmt::format("[rank {}/{}] {}: {}", rank, size, op, detail)),
      rank_(rank),
      op_(std::move(op)) {}

namespace {
constexpr util::EnumNames<ReduceOp, 4> kReduceOpNames{
    {{{ReduceOp::Sum, "sum"}, {ReduceOp::Avg, "avg"}, {ReduceOp::Max, "max"}, {ReduceOp::Min, "min"}}}};
}  // namespace

std::string to_string(ReduceOp op) {
  return kReduceOpNames.name(op);
}

ReduceOp parse_reduce_op(const std::string& name) {
  return kReduceOpNames.parse(name, "reduce op");
}

namespace {

using util::Clock;
using util::IntervalClock;
using util::seconds_between;
using util::seconds_since;

// Times the wait, turns whatever the backend throws into a CommError naming rank and op (with
// the flight recorder's report when it timed out), and marks the operation finished in the
// recorder. It holds plain pointers, not std::functions: at 4 KB two heap-allocated closures per
// asynchronous call showed in send/recv latency. The communicator outlives its Work handles.
class TrackedWork final : public Work {
 public:
  TrackedWork(WorkPtr inner, Communicator* comm, CommStatsRecorder* stats, FlightRecorder* recorder,
              std::size_t slot, const char* op, std::uint64_t bytes, Clock::time_point started)
      : inner_(std::move(inner)),
        comm_(comm),
        stats_(stats),
        recorder_(recorder),
        slot_(slot),
        op_(op),
        bytes_(bytes),
        started_(started) {}

  bool completed() override {
    return settled_by([this] { return inner_->completed(); });
  }

  bool poll() override {
    return settled_by([this] { return inner_->poll(); });
  }

  void wait() override {
    // Finished already (a transfer that landed during compute, the second of two waits): no time
    // was spent waiting, so none is read or recorded.
    if (poll()) return;
    const auto start = IntervalClock::now();
    try {
      inner_->wait();
    } catch (const CommError&) {
      stats_->add_wait(op_, IntervalClock::seconds_since(start));
      settle(false);
      throw;
    } catch (const std::exception& e) {
      stats_->add_wait(op_, IntervalClock::seconds_since(start));
      throw error(e.what());
    }
    stats_->add_wait(op_, IntervalClock::seconds_since(start));
    settle(true);
  }

 private:
  // One test of the inner Work (completed() or poll()): settles the operation when it finished,
  // and turns what it throws into a CommError.
  template <typename Test>
  bool settled_by(Test&& test) {
    bool done = false;
    try {
      done = test();
    } catch (const CommError&) {
      settle(false);
      throw;
    } catch (const std::exception& e) {
      throw error(e.what());
    }
    if (done) settle(true);
    return done;
  }

  void settle(bool ok) {
    if (settled_) return;
    settled_ = true;
    recorder_->finish(slot_, ok);
  }

  CommError error(const std::string& what) {
    // The report while the operation still counts as running, so that it names it.
    const auto report = comm_->failure_report(what, seconds_between(started_, util::coarse_now()));
    settle(false);
    return CommError(comm_->rank(), comm_->size(),
                     fmt::format("{} ({} bytes, {})", op_, bytes_, comm_->backend()), what + report);
  }

  WorkPtr inner_;
  Communicator* comm_;
  CommStatsRecorder* stats_;
  FlightRecorder* recorder_;
  std::size_t slot_;
  const char* op_;
  std::uint64_t bytes_;
  Clock::time_point started_;
  bool settled_ = false;
};

// Note [Tensors on another device]
// A backend carries tensors in one place: gloo and mpi read and write host memory (Gloo's unbound
// buffers and MPI's calls take raw pointers; Debian's Open MPI is not CUDA-aware), nccl reads and
// writes its GPU's memory. Training on a GPU hands the communicator both: parameters, gradients
// and activations on the GPU, and small host tensors (metric sums, batch sizes, an overflow flag,
// a pipeline's headers, RNG states). Rather than have every caller know where each backend wants
// its tensors, the Communicator moves them: a tensor the backend cannot carry where it lives
// (staging_device()) is copied to where it can, the backend works on the copy, and what the call
// writes is copied back when the call completes (in wait() or completed(), on the waiting thread,
// after the backend's own completion step such as Avg's division; never on a backend's thread).
// Copies to the GPU and back run on the caller's current stream, which c10d's NCCL orders its own
// stream after; a copy from the GPU to pageable host memory returns when it has landed.
// This is what Horovod does without a CUDA-aware MPI, and what c10d's Gloo does inside for its
// CUDA all-reduce and broadcast. It costs a copy each way, so gloo and mpi train on a GPU at the
// speed of host memory and PCIe; nccl is what a GPU job should use (parallel.backend: auto picks it
// for train.device: cuda). Stats and wire bytes count the caller's tensor, as the bytes sent.
// A tensor already where the backend wants it costs one device comparison per tensor per call.
class StagedWork final : public Work {
 public:
  StagedWork(WorkPtr inner, std::vector<at::Tensor> held,
             std::vector<std::pair<at::Tensor, at::Tensor>> written)
      : inner_(std::move(inner)), held_(std::move(held)), written_(std::move(written)) {}

  bool completed() override {
    if (inner_ && !inner_->completed()) return false;
    copy_back();
    return true;
  }
  bool poll() override {
    if (inner_ && !inner_->poll()) return false;
    copy_back();
    return true;
  }
  void wait() override {
    if (inner_) inner_->wait();
    copy_back();
  }

 private:
  void copy_back() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_) return;
    for (auto& [caller, copy] : written_) caller.copy_(copy);
    done_ = true;
    written_.clear();
    held_.clear();
  }

  WorkPtr inner_;
  std::vector<at::Tensor> held_;
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;
  std::mutex mutex_;
  bool done_ = false;
};

}  // namespace

at::Tensor Communicator::stage(const at::Tensor& tensor, bool read, bool written, Staging& staging) const {
  const auto device = staging_device(tensor);
  if (!device) return tensor;
  at::Tensor copy = at::empty_like(tensor, tensor.options().device(*device));
  if (read) copy.copy_(tensor);
  if (written) staging.written.emplace_back(tensor, copy);
  staging.held.push_back(copy);
  return copy;
}

WorkPtr Communicator::staged(WorkPtr work, Staging&& staging) {
  if (staging.held.empty()) return work;
  return std::make_shared<StagedWork>(std::move(work), std::move(staging.held), std::move(staging.written));
}

WorkPtr completed_work() {
  // A handle with no control block (shared_ptr's aliasing constructor with an empty owner): copying
  // and dropping it touch no reference count, two atomic updates saved on every blocking call
  // (Note [The cost of a small call]). The object itself lives for the whole program.
  static CompletedWork done;
  return WorkPtr(WorkPtr(), &done);
}

Communicator::Communicator(int rank, int size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), timeout_(timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument(fmt::format("invalid rank {} for world size {}", rank, size));
  }
}

Communicator::~Communicator() = default;

void Communicator::fail(const std::string& op, const std::string& detail) const {
  throw CommError(rank_, size_, op, detail);
}

// Note [Flight recorder]
// Every communicator records its operations in a ring of the last 64 (FlightRecorder): the
// fingerprint of each call and when it started and ended, a few stores per call and no lock (Note
// [A recorder without a lock] in FlightRecorder.cpp), so it is always on. When an operation times out, the
// error says more than "timed out": every rank that timed out publishes a one-line report (the collective it
// completed last and the one it waits in) through the rendezvous store and, for a short grace (a quarter of
// the timeout, at most 5 s), reads the others'. The error then names each rank's last completed
// collective and the ranks that published nothing: those stopped responding, and since
// every collective the reporting ranks completed needed them too, they stopped after the last
// of those. Errors that are not timeouts (a peer's socket closed because it died) report nothing
// more and wait for nothing, so that a crash still ends the job at once. The mpi backend has no
// store; its report speaks for this rank only, and mpirun gathers every rank's.
// PyTorch's NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) keeps a similar ring per process
// group and dumps it to a file per rank on a watchdog timeout, to be merged afterwards by a
// separate tool; here the ranks merge their reports themselves, so the one error line names the
// culprit, and the ring stays small (no stack traces, no tensor sizes beyond the element count).

std::vector<std::string> Communicator::exchange_reports(const std::string&, std::chrono::milliseconds) {
  return {};
}

namespace {

bool says_timed_out(const std::string& cause) {
  std::string lower(cause);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

// "<seq of the last completed collective>\t<summary>": what a rank publishes.
std::pair<std::int64_t, std::string> parse_report(const std::string& report) {
  const auto tab = report.find('\t');
  if (tab == std::string::npos) return {-1, report};
  try {
    return {std::stoll(report.substr(0, tab)), report.substr(tab + 1)};
  } catch (const std::exception&) {
    return {-1, report.substr(tab + 1)};
  }
}

}  // namespace

std::string Communicator::failure_report(const std::string& cause, double elapsed_seconds) {
  const double timeout_seconds = std::chrono::duration<double>(timeout_).count();
  if (!says_timed_out(cause) && elapsed_seconds < 0.5 * timeout_seconds) return "";
  const auto last = recorder_.last_completed();
  const std::int64_t last_seq = last ? last->seq : 0;
  const std::string mine = recorder_.summary();
  const auto grace = std::clamp<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(200),
                                                           std::chrono::milliseconds(5000));
  std::vector<std::string> reports;
  try {
    reports = exchange_reports(fmt::format("{}\t{}", last_seq, mine), grace);
  } catch (const std::exception& e) {
    return fmt::format("; flight recorder: this rank {} (the other ranks' reports are unavailable: {})", mine,
                       e.what());
  }
  if (reports.size() != static_cast<std::size_t>(size_)) {
    return fmt::format("; flight recorder: this rank {}", mine);
  }
  std::string out = "; flight recorder:";
  std::vector<int> silent;
  std::int64_t common = last_seq;  // the last collective every reporting rank completed
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      out += fmt::format(" rank {} (this one) {};", r, mine);
      continue;
    }
    if (reports[r].empty()) {
      silent.push_back(r);
      continue;
    }
    const auto [seq, text] = parse_report(reports[r]);
    if (seq >= 0) common = std::min(common, seq);
    out += fmt::format(" rank {} {};", r, text);
  }
  if (silent.empty()) {
    out +=
        " every rank reported, so none stopped: they wait in different collectives (set parallel.debug: "
        "detail to compare every call)";
  } else {
    out += fmt::format(
        " rank{} {} sent no report within {:.1f} s: stopped responding after collective #{}, "
        "the last one every reporting rank completed",
        silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), std::chrono::duration<double>(grace).count(),
        common);
  }
  return out;
}

// Note [The cost of a small call]
// At 4 KB an MPI collective between two ranks of one host takes 0.5-0.6 us (MPI_Allgather,
// MPI_Reduce_scatter_block), so every 50 ns dtrain adds around it is 10%. No single cost
// dominates; the time is in small fixed costs per call, and locked instructions (a mutex, a
// fetch_add) and clock reads right after MPI's own work cost several times what they cost in a
// loop. So the per-call path keeps each of them out:
// - statistics: CommStatsRecorder keeps a slot per operation-name literal, found by its address,
//   rather than building a std::string and looking it up in a std::map per call;
// - the mpi backend's blocking path asks "is anything queued? is the communicator broken?" through
//   atomics, not its progress engine's lock;
// - the watchdog's arming time and every operation's deadline (read again on every unsuccessful
//   test while polling) come from the coarse monotonic clock (a few ns, one tick of lag, which both
//   add to their timeout so that nothing times out early: the watchdog still ends a blocking call
//   that outlives parallel.timeout_s, at most a tick later);
// - a backend may return an empty handle for a blocking call that has finished, rather than a
//   shared Work handle only to be waited on and dropped (two atomic reference-count updates);
// - send and recv are an Operation class of their own, held in their Work with their Pending
//   record (Note [One allocation per transfer] in mpi/MpiProgressEngine.cpp), not a std::function
//   holding their arguments (a heap allocation per transfer);
// - the flight recorder reads the coarse clock (its times are a report's tenths of a second);
// - posting an asynchronous call reads only the coarse clock (for a failure report's seconds), and
//   a wait() that finds the operation finished at its first test (Work::poll) reads no clock and
//   records no waiting;
// - a call's wait time is read from util::IntervalClock (the time-stamp counter where the kernel
//   keeps time with it: Note [Interval ticks] in util/Clock.h);
// - the flight recorder and the statistics written by the issuing thread take no lock (Note [A
//   recorder without a lock] in FlightRecorder.cpp; CommStats.h), relying on operations being
//   issued by one thread at a time, as collectives_ always is;
// - the public calls take their tensors by reference (a copy is two atomic updates each), and the
//   backend's wire-byte model is asked once per distinct call (wire_bytes_of).
// What is left per blocking call: the MPI lock (MPI_THREAD_SERIALIZED), the tensor checks, two
// counter reads, the virtual calls and the watchdog's arming. An asynchronous send or recv costs
// more (two handles, the transfer's and this one).
// Measured (2-vCPU VM, bench/mpi_compare.cpp, 4 KB, fast state): 1.04-1.12x the raw MPI call.
WorkPtr Communicator::track(const CallFingerprint& call, std::uint64_t bytes, std::uint64_t wire_bytes,
                            bool async_op, c10::function_ref<WorkPtr()> start) {
  const char* op = call.op;
  const std::size_t slot = recorder_.start(call);
  // The label is formatted only when something failed: at 4 KB a string per call shows in latency.
  auto on_error = [this, op, bytes, slot](const std::string& what, double waited) {
    const auto report = failure_report(what, waited);
    recorder_.finish(slot, false);
    return CommError(rank_, size_, fmt::format("{} ({} bytes, {})", op, bytes, backend()), what + report);
  };
  if (!async_op) {
    // A synchronous call counts its whole duration as waiting: the caller could do nothing else.
    // One stats update, no handle: this is the latency path.
    const auto t0 = IntervalClock::now();
    try {
      if (debug_ == DebugMode::Detail && call.seq > 0) check_fingerprint(call);
      if (WorkPtr work = start()) work->wait();
    } catch (const CommError&) {
      stats_.add(op, bytes, wire_bytes, IntervalClock::seconds_since(t0));
      recorder_.finish(slot, false);
      throw;
    } catch (const std::exception& e) {
      const double waited = IntervalClock::seconds_since(t0);
      stats_.add(op, bytes, wire_bytes, waited);
      throw on_error(e.what(), waited);
    }
    stats_.add(op, bytes, wire_bytes, IntervalClock::seconds_since(t0));
    recorder_.finish(slot, true);
    return completed_work();
  }
  // Posting is not waiting: an asynchronous call's time counts from its Work's wait(). Its start
  // is kept, on the coarse clock, only for a failure report's seconds.
  const auto posted = util::coarse_now();
  stats_.add_call(op, bytes, wire_bytes);
  WorkPtr inner;
  try {
    if (debug_ == DebugMode::Detail && call.seq > 0) check_fingerprint(call);
    inner = start();
  } catch (const CommError&) {
    stats_.add_wait(op, seconds_between(posted, util::coarse_now()));
    recorder_.finish(slot, false);
    throw;
  } catch (const std::exception& e) {
    const double waited = seconds_between(posted, util::coarse_now());
    stats_.add_wait(op, waited);
    throw on_error(e.what(), waited);
  }
  TORCH_INTERNAL_ASSERT(inner, "backend returned no Work for ", op);
  return std::make_shared<TrackedWork>(std::move(inner), this, &stats_, &recorder_, slot, op, bytes, posted);
}

// Note [Collective checks]
// A collective that ranks call differently (another operation, size, type, root or reduction;
// one rank skipping a call) makes the ranks wait for each other forever, or worse, lets them
// combine unrelated buffers. With parallel.debug: detail (TORCH_DISTRIBUTED_DEBUG=DETAIL's
// counterpart) every collective first all-gathers a fixed record of its fingerprint (operation,
// element type, element count, root, reduction, its number on this communicator) through the same
// backend, and every rank compares all of them: on a difference every rank throws the same
// one-line CommError, "rank 0 called allreduce(float32, 1000, sum, #17) but rank 1 called
// broadcast(float32, 10, root 0, #17)", before any data moves. The record has the same size
// whatever the call, so the check itself always matches. A rank that never arrives makes the
// check time out, and the flight recorder's report names it (Note [Flight recorder]).
// c10d's ProcessGroupWrapper does the same with a separate Gloo group for the check and a
// monitored barrier before it (rank 0 collects the others' arrivals through the store); it
// compares each tensor's shape, where we compare element counts (dtrain's collectives are flat)
// and, since c10d 2.x, a sequence number that we also carry. Costs one small blocking collective
// per collective, and asynchronous collectives are checked when issued (bench/debug_overhead.sh
// measures what that costs a training step).
void Communicator::check_fingerprint(const CallFingerprint& call) {
  const auto words = encode(call);
  at::Tensor mine = at::empty({kFingerprintWords}, at::TensorOptions().dtype(at::kLong));
  std::copy(words.begin(), words.end(), mine.data_ptr<std::int64_t>());
  at::Tensor all = at::empty({kFingerprintWords * size_}, mine.options());
  {
    Staging staging;
    const auto in = stage(mine, true, false, staging);
    const auto out = stage(all, false, true, staging);
    if (auto work = staged(do_allgather(in, out, /*async_op=*/false), std::move(staging))) work->wait();
  }
  const auto* w = all.data_ptr<std::int64_t>();
  for (int r = 0; r < size_; ++r) {
    const auto theirs = decode(w + r * kFingerprintWords);
    const auto first = decode(w);
    if (theirs != first) {
      fail(call.op, fmt::format("parallel.debug detail: rank 0 called {} but rank {} called {}",
                                describe(first), r, describe(theirs)));
    }
  }
}

std::uint64_t Communicator::wire_bytes_of(const WireCall& call) {
  WireMemo& memo = wire_memo_[static_cast<std::size_t>(call.op)];
  if (!memo.known || !(memo.call == call)) {
    memo.bytes = wire_bytes(call);
    memo.call = call;
    memo.known = true;
  }
  return memo.bytes;
}

CallFingerprint Communicator::fingerprint(CommOp op, const at::Tensor* tensor, int peer, int reduce) {
  const CollectiveInfo& row = collective_info(op);
  CallFingerprint call;
  call.op = row.name;
  if (tensor) {
    call.dtype = tensor->scalar_type();
    call.numel = tensor->numel();
  }
  call.root = peer;
  call.reduce = row.reduces ? reduce : -1;
  if (row.collective) call.seq = ++collectives_;
  return call;
}

}  // namespace dtrain::comm
