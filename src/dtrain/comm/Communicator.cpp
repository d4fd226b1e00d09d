#include "dtrain/comm/Communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

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
using util::seconds_since;

std::uint64_t nbytes(const at::Tensor& t) {
  return static_cast<std::uint64_t>(t.numel()) * t.element_size();
}

// Times the wait, and turns whatever the backend throws into a CommError naming rank and op. It
// holds plain pointers, not std::functions: at 4 KB two heap-allocated closures per asynchronous
// call showed in send/recv latency. The communicator outlives its Work handles.
class TrackedWork final : public Work {
 public:
  TrackedWork(WorkPtr inner, const Communicator* comm, CommStatsRecorder* stats, const char* op,
              std::uint64_t bytes)
      : inner_(std::move(inner)), comm_(comm), stats_(stats), op_(op), bytes_(bytes) {}

  bool completed() override {
    try {
      return inner_->completed();
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      throw error(e.what());
    }
  }

  void wait() override {
    const auto start = Clock::now();
    try {
      inner_->wait();
    } catch (const CommError&) {
      stats_->add_wait(op_, seconds_since(start));
      throw;
    } catch (const std::exception& e) {
      stats_->add_wait(op_, seconds_since(start));
      throw error(e.what());
    }
    stats_->add_wait(op_, seconds_since(start));
  }

 private:
  CommError error(const std::string& what) const {
    return CommError(comm_->rank(), comm_->size(),
                     fmt::format("{} ({} bytes, {})", op_, bytes_, comm_->backend()), what);
  }

  WorkPtr inner_;
  const Communicator* comm_;
  CommStatsRecorder* stats_;
  const char* op_;
  std::uint64_t bytes_;
};

}  // namespace

WorkPtr completed_work() {
  static const WorkPtr done = std::make_shared<CompletedWork>();
  return done;
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

// Note [The cost of a small call]
// At 4 KB an MPI collective between two ranks of one host takes 0.5-0.6 us (MPI_Allgather,
// MPI_Reduce_scatter_block), so every 50 ns dtrain adds around it is 10%. Measured with
// bench/mpi_compare.cpp (A B A B against the raw call on the same buffers) and perf, the time was
// not in any one place but in small fixed costs per call, of which these were removed:
// - statistics: each call built a std::string from the operation's name and looked it up in a
//   std::map, twice for an asynchronous call (add_call, add_wait); CommStatsRecorder now keeps a
//   slot per name literal, found by its address;
// - the mpi backend's blocking path took its progress engine's lock twice per call (is anything
//   queued? is the communicator broken?); both are atomics now;
// - steady_clock reads: the watchdog's arming time and the deadline of every operation (read again
//   on every unsuccessful test while polling) come from the coarse monotonic clock (a few ns, one
//   tick of lag, which both add to their timeout so that nothing times out early: the watchdog
//   still ends a blocking call that outlives parallel.timeout_s, at most a tick later);
// - a blocking call handed back a shared Work handle only for it to be waited on and dropped (two
//   atomic reference-count updates); a backend may now return an empty handle for a call that has
//   finished;
// - send and recv built a std::function holding their arguments (a heap allocation per transfer);
//   they are an Operation class of their own.
// What is left per blocking call: two steady_clock reads for the call's wait time in CommStats,
// the statistics lock, the MPI lock (MPI_THREAD_SERIALIZED), the tensor checks and the virtual
// calls, about 0.1 us. bench/RESULTS.md has the figures before and after.
WorkPtr Communicator::track(const char* op, std::uint64_t bytes, std::uint64_t wire_bytes, bool async_op,
                            c10::function_ref<WorkPtr()> start) {
  // The label is formatted only when something failed: at 4 KB a string per call shows in latency.
  auto on_error = [this, op, bytes](const std::string& what) {
    return CommError(rank_, size_, fmt::format("{} ({} bytes, {})", op, bytes, backend()), what);
  };
  const auto t0 = Clock::now();
  if (!async_op) {
    // A synchronous call counts its whole duration as waiting: the caller could do nothing else.
    // One stats update, no handle: this is the latency path.
    try {
      if (WorkPtr work = start()) work->wait();
    } catch (const CommError&) {
      stats_.add(op, bytes, wire_bytes, seconds_since(t0));
      throw;
    } catch (const std::exception& e) {
      stats_.add(op, bytes, wire_bytes, seconds_since(t0));
      throw on_error(e.what());
    }
    stats_.add(op, bytes, wire_bytes, seconds_since(t0));
    return completed_work();
  }
  stats_.add_call(op, bytes, wire_bytes);
  WorkPtr inner;
  try {
    inner = start();
  } catch (const CommError&) {
    stats_.add_wait(op, seconds_since(t0));
    throw;
  } catch (const std::exception& e) {
    stats_.add_wait(op, seconds_since(t0));
    throw on_error(e.what());
  }
  TORCH_INTERNAL_ASSERT(inner, "backend returned no Work for ", op);
  return std::make_shared<TrackedWork>(std::move(inner), this, &stats_, op, bytes);
}

namespace {

void check_tensor(const Communicator& c, const at::Tensor& t, const char* op, const char* what) {
  if (!t.defined()) {
    throw CommError(c.rank(), c.size(), op, std::string(what) + " is an undefined tensor");
  }
  if (t.layout() != at::kStrided || !t.is_contiguous()) {
    throw CommError(c.rank(), c.size(), op,
                    std::string(what) + " must be a dense contiguous tensor; call .contiguous() first");
  }
}

void check_same(const Communicator& c, const at::Tensor& a, const at::Tensor& b, const char* op) {
  if (a.scalar_type() != b.scalar_type() || a.device() != b.device()) {
    throw CommError(
        c.rank(), c.size(), op,
        fmt::format("input and output differ: {} on {} against {} on {}", c10::toString(a.scalar_type()),
                    a.device().str(), c10::toString(b.scalar_type()), b.device().str()));
  }
}

void check_peer(const Communicator& c, int peer, const char* op, const char* what) {
  if (peer < 0 || peer >= c.size()) {
    throw CommError(c.rank(), c.size(), op, fmt::format("{} {} is outside [0, {})", what, peer, c.size()));
  }
}

WireCall wire_call(CommOp op, const at::Tensor& t, bool async_op, int root = 0) {
  WireCall call;
  call.op = op;
  call.numel = t.numel();
  call.element_size = static_cast<std::int64_t>(t.element_size());
  call.root = root;
  call.async_op = async_op;
  call.bfloat16 = t.scalar_type() == at::kBFloat16;
  return call;
}

}  // namespace

WorkPtr Communicator::allreduce(at::Tensor tensor, ReduceOp op, bool async_op) {
  check_tensor(*this, tensor, "allreduce", "tensor");
  if (size_ == 1) return completed_work();
  const auto b = nbytes(tensor);
  return track("allreduce", b, wire_bytes(wire_call(CommOp::Allreduce, tensor, async_op)), async_op,
               [&] { return do_allreduce(tensor, op, async_op); });
}

WorkPtr Communicator::allgather(at::Tensor input, at::Tensor output, bool async_op) {
  check_tensor(*this, input, "allgather", "input");
  check_tensor(*this, output, "allgather", "output");
  check_same(*this, input, output, "allgather");
  if (output.numel() != input.numel() * size_) {
    fail("allgather", fmt::format("output has {} elements; expected world size {} x input's {}",
                                  output.numel(), size_, input.numel()));
  }
  if (size_ == 1) {
    output.view({-1}).copy_(input.view({-1}));
    return completed_work();
  }
  const auto b = nbytes(output);
  return track("allgather", b, wire_bytes(wire_call(CommOp::Allgather, input, async_op)), async_op,
               [&] { return do_allgather(input, output, async_op); });
}

WorkPtr Communicator::broadcast(at::Tensor tensor, int root, bool async_op) {
  check_tensor(*this, tensor, "broadcast", "tensor");
  check_peer(*this, root, "broadcast", "root");
  if (size_ == 1) return completed_work();
  const auto b = nbytes(tensor);
  return track("broadcast", b, wire_bytes(wire_call(CommOp::Broadcast, tensor, async_op, root)), async_op,
               [&] { return do_broadcast(tensor, root, async_op); });
}

WorkPtr Communicator::reduce_scatter(at::Tensor input, at::Tensor output, ReduceOp op, bool async_op) {
  check_tensor(*this, input, "reduce_scatter", "input");
  check_tensor(*this, output, "reduce_scatter", "output");
  check_same(*this, input, output, "reduce_scatter");
  if (input.numel() != output.numel() * size_) {
    fail("reduce_scatter", fmt::format("input has {} elements; expected world size {} x output's {}",
                                       input.numel(), size_, output.numel()));
  }
  if (size_ == 1) {
    output.view({-1}).copy_(input.view({-1}));
    return completed_work();
  }
  const auto b = nbytes(input);
  return track("reduce_scatter", b, wire_bytes(wire_call(CommOp::ReduceScatter, input, async_op)), async_op,
               [&] { return do_reduce_scatter(input, output, op, async_op); });
}

WorkPtr Communicator::alltoall(at::Tensor input, at::Tensor output, bool async_op) {
  check_tensor(*this, input, "alltoall", "input");
  check_tensor(*this, output, "alltoall", "output");
  check_same(*this, input, output, "alltoall");
  if (input.numel() != output.numel() || input.numel() % size_ != 0) {
    fail("alltoall",
         fmt::format("input ({}) and output ({}) must have the same number of elements, divisible by "
                     "world size {}",
                     input.numel(), output.numel(), size_));
  }
  if (size_ == 1) {
    output.view({-1}).copy_(input.view({-1}));
    return completed_work();
  }
  const auto b = nbytes(input);
  return track("alltoall", b, wire_bytes(wire_call(CommOp::Alltoall, input, async_op)), async_op,
               [&] { return do_alltoall(input, output, async_op); });
}

WorkPtr Communicator::send(at::Tensor tensor, int dst, int tag, bool async_op) {
  check_tensor(*this, tensor, "send", "tensor");
  check_peer(*this, dst, "send", "destination");
  if (dst == rank_) fail("send", "destination is this rank itself");
  const auto b = nbytes(tensor);
  return track("send", b, wire_bytes(wire_call(CommOp::Send, tensor, async_op)), async_op,
               [&] { return do_send(tensor, dst, tag, async_op); });
}

WorkPtr Communicator::recv(at::Tensor tensor, int src, int tag, bool async_op) {
  check_tensor(*this, tensor, "recv", "tensor");
  check_peer(*this, src, "recv", "source");
  if (src == rank_) fail("recv", "source is this rank itself");
  return track("recv", nbytes(tensor), wire_bytes(wire_call(CommOp::Recv, tensor, async_op)), async_op,
               [&] { return do_recv(tensor, src, tag, async_op); });
}

WorkPtr Communicator::barrier(bool async_op) {
  if (size_ == 1) return completed_work();
  WireCall call;
  call.async_op = async_op;
  return track("barrier", 0, wire_bytes(call), async_op, [&] { return do_barrier(async_op); });
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& ranks) {
  if (ranks.empty()) fail("split", "the rank list is empty");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    check_peer(*this, ranks[i], "split", "rank");
    if (i > 0 && ranks[i] <= ranks[i - 1]) fail("split", "ranks must be sorted and distinct");
  }
  try {
    return do_split(ranks);
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    fail("split", e.what());
  }
}

}  // namespace dtrain::comm
