// dtrain's operations on a c10d process group. See Note [Emulated collectives] for what c10d's
// Gloo lacks and what the emulation costs.
#include "dtrain/comm/c10d/C10dCommunicator.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

namespace dtrain::comm {

// Note [Emulated collectives]
// LibTorch 1.13's ProcessGroupGloo throws on ReduceOp::AVG, _allgather_base, reduce_scatter and
// _reduce_scatter_base. Here:
// - Avg is a Sum followed by an in-place division on completion: one extra pass over the tensor,
//   no extra bytes. Integer tensors are refused (the mean of integers is not an integer).
// The gloo backend runs reduce_scatter and the flat allgather natively on the group's Gloo context
// (C10dCapabilities::reduce_scatter and allgather; Note [Gloo's native collectives]); for a backend
// without them and without flat collectives:
// - allgather passes the flat output's chunk views as c10d's output list; Gloo gathers into one
//   buffer and copies it into the views: one extra copy of the output, no extra bytes.
// - reduce_scatter is an alltoall (chunk j of every rank lands on rank j) followed by a local
//   reduction of the n received chunks. Each rank sends (n-1)/n of its input, the same bytes as a
//   ring reduce-scatter and half of what an allreduce-then-slice would send; it costs one
//   temporary of the input's size and the local reduction that the ring would do anyway.
// Data-movement operations (allgather, broadcast, alltoall, send, recv) move bytes, so they view
// tensors as uint8: every dtype works, including those Gloo cannot reduce (BFloat16, Bool, complex).
//
// Note [bfloat16 on Gloo]
// LibTorch 1.13's ProcessGroupGloo cannot reduce bfloat16 (its type switch ends at float16 and
// throws "Invalid scalar type"), which made `parallel.data_parallel.compression: bf16` fail on the
// default backend. Three ways to reduce it with what Gloo has:
// - widen to float32 and all-reduce: 4 bytes an element on the wire, so bf16 would save nothing;
// - all-gather the 2-byte payloads and sum locally: (n-1) x the buffer per rank, more than the
//   float32 ring's 2(n-1)/n x 2 once n > 4;
// - what we do: a reduce-scatter and an all-gather of the 2-byte payloads, with a float32 sum in
//   between. The buffer is padded to n equal chunks; an alltoall brings chunk j of every rank to
//   rank j, which sums the n copies in float32 and rounds once to bfloat16; an all-gather of the
//   reduced chunks gives every rank the same bits. Each rank sends 2(n-1)/n of the padded buffer
//   in 2-byte elements, what a bfloat16 ring would send and half of float32's; wire_bytes()
//   reports exactly these two operations, padding included. The sum is rounded once rather than
//   at every hop of a ring.
// The local reduction sits between the two collectives. Issuing the all-gather later, from a
// wait(), could order it differently against collectives issued meanwhile on different ranks, so
// the exchange runs inline: an async_op call returns completed, and a bfloat16 all-reduce on gloo
// does not overlap with its caller. LibTorch 2.x's ProcessGroupGloo built against a Gloo without
// torch's types (Debian's) cannot reduce float16 either, which then takes the same way
// (C10dCapabilities::reduces_float16).

namespace {

std::string error_text(const std::exception& e) {
  // c10::Error::what() appends a C++ backtrace that tells a user nothing.
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// Runs a c10d call, turning c10::Error into an error without the backtrace; the Communicator
// base turns it into a CommError naming rank and operation.
template <typename F>
auto call_c10d(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

::c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return ::c10d::ReduceOp::SUM;  // See Note [Emulated collectives]
    case ReduceOp::Max:
      return ::c10d::ReduceOp::MAX;
    case ReduceOp::Min:
      return ::c10d::ReduceOp::MIN;
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled ReduceOp ", static_cast<int>(op));
}

at::Tensor as_bytes(const at::Tensor& t) {
  return t.view({-1}).view(at::kByte);
}

// out = op over the rows of `rows` (ranks, chunk), in float32 for 16-bit floats so that the
// result is rounded once: the local step of an emulated reduce_scatter or bfloat16 all-reduce.
void reduce_rows(const at::Tensor& rows, const at::Tensor& out, ReduceOp op, int n) {
  const bool narrow = rows.scalar_type() == at::kBFloat16 || rows.scalar_type() == at::kHalf;
  const at::Tensor in = narrow ? rows.to(at::kFloat) : rows;
  at::Tensor result;
  switch (op) {
    case ReduceOp::Sum:
      result = in.sum(0);
      break;
    case ReduceOp::Avg:
      result = in.sum(0).div_(n);
      break;
    case ReduceOp::Max:
      result = at::amax(in, {0});
      break;
    case ReduceOp::Min:
      result = at::amin(in, {0});
      break;
  }
  out.view({-1}).copy_(result);
}

// Note [Polling before blocking]
// A c10d Work completes on a backend thread (Gloo's worker, woken by its device thread) and
// wakes the waiter through a condition variable. On a host whose cores are all busy, which is
// the normal state of data-parallel training with a rank per core, each such wake-up waits for
// the scheduler: up to a tick (4 ms at 250 Hz). Polling isCompleted() and yielding between polls
// keeps the waiting thread runnable, so it sees completion at once, and sched_yield() hands the
// core to the backend's threads whenever they can run. MPI libraries wait this way. After the
// polling budget the wait blocks, so a long wait (a slow peer) does not burn a core for nothing.
// Measured (2-vCPU VM, mlp over gloo, 2 ranks): 31k samples/s blocking, 56k polling.

// Note [Gloo's send and recv]
// c10d Gloo's SendWork and RecvWork complete only inside wait(): isCompleted() stays false until
// someone waits, so neither completed() nor Note [Polling before blocking]'s poll can see them
// finish: a blocking send/recv that polled isCompleted() would spend the whole poll budget, 50 ms,
// in vain, and a thread per operation that waits for it costs a thread start per transfer. So
// wait() waits for the transfer on the caller's thread, as c10d's own users do, and only
// completed() called before wait() starts a thread that waits, so that it can answer without
// blocking; the usual post, compute, wait pattern starts no thread. The thread is per operation, so that no
// transfer waits behind another one that the peer has not yet matched.

// Wraps a c10d Work: waits with the communicator's timeout and runs a completion step (the
// division of an emulated Avg, the local reduction of an emulated reduce_scatter) exactly once.
class C10dWork final : public Work {
 public:
  // waits_inside_wait: the Work completes only inside wait() (Note [Gloo's send and recv]).
  C10dWork(compat::WorkHandle work, std::chrono::milliseconds timeout, std::chrono::microseconds poll,
           std::function<void()> finish, bool waits_inside_wait)
      : work_(std::move(work)),
        timeout_(timeout),
        poll_(poll),
        finish_(std::move(finish)),
        inside_wait_(waits_inside_wait) {}

  ~C10dWork() override {
    if (waiter_.joinable()) waiter_.join();
  }

  bool completed() override {
    if (inside_wait_) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!waited_inline_ && !waiter_.joinable() && !waiter_joined_) start_waiter_locked();
      }
      if (!waited_inline_ && !waited_.load(std::memory_order_acquire)) return false;
      join_waiter();
    } else {
      if (!call_c10d([&] { return work_->isCompleted(); })) return false;
      if (auto error = work_->exception()) rethrow(error);
    }
    finish_once();
    return true;
  }

  // A send or recv of c10d Gloo cannot be asked without starting a thread (Note [Gloo's send and
  // recv]); anything else can, and once c10d says it completed, its wait() has nothing left to do
  // (a CUDA work's end event has passed, so no stream needs to wait for it).
  bool poll() override { return !inside_wait_ && completed(); }

  void wait() override {
    if (inside_wait_) {
      bool inline_wait = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        inline_wait = !waiter_.joinable() && !waiter_joined_;
      }
      if (inline_wait) {
        call_c10d([&] { return work_->wait(timeout_); });
        waited_inline_ = true;
      } else {
        join_waiter();
      }
    } else {
      if (poll_.count() > 0) {
        // See Note [Polling before blocking].
        const auto until = std::chrono::steady_clock::now() + poll_;
        while (!call_c10d([&] { return work_->isCompleted(); }) && std::chrono::steady_clock::now() < until) {
          sched_yield();
        }
      }
      call_c10d([&] { return work_->wait(timeout_); });
    }
    finish_once();
  }

 private:
  void start_waiter_locked() {
    waiter_ = std::thread([this] {
      try {
        work_->wait(timeout_);
      } catch (const std::exception& e) {
        waiter_error_ = std::make_exception_ptr(std::runtime_error(error_text(e)));
      }
      waited_.store(true, std::memory_order_release);
    });
  }

  void join_waiter() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (waiter_.joinable()) {
        waiter_.join();
        waiter_joined_ = true;
      }
    }
    if (waiter_error_) std::rethrow_exception(waiter_error_);
  }

  [[noreturn]] static void rethrow(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      throw std::runtime_error(error_text(e));
    }
  }

  void finish_once() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finish_) {
      finish_();
      finish_ = nullptr;
    }
  }

  compat::WorkHandle work_;
  std::chrono::milliseconds timeout_;
  std::chrono::microseconds poll_;
  std::function<void()> finish_;
  const bool inside_wait_;
  std::mutex mutex_;
  std::thread waiter_;
  bool waiter_joined_ = false;  // guarded by mutex_
  bool waited_inline_ = false;  // set by wait() on the caller's thread
  std::atomic<bool> waited_{false};
  std::exception_ptr waiter_error_;
};

}  // namespace

// Note [Grouped point-to-point]
// NCCL runs the point-to-point messages of a communicator in the order they are posted: a rank
// that posts a receive from a neighbour and then a send to it waits in the receive for the
// neighbour's send, which that neighbour posts only after its own receive, so two ranks gossiping
// this way wait on each other for ever. Grouped (ncclGroupStart ... ncclGroupEnd, which c10d opens
// with startCoalescing and issues with endCoalescing), the messages of a batch are matched as one
// operation, whatever their order; torch.distributed.batch_isend_irecv does the same, and so does
// BlueFog's neighbor_allreduce on NCCL. A grouped transfer's Work is that of the whole group: a
// rank cannot use one message of a batch before the others have arrived, which the gossip, which
// waits for every neighbour anyway, does not need.
struct C10dP2PGroup {
  std::vector<compat::WorkHandle> issued;  // what c10d's send and recv returned inside the group
  WorkPtr whole;                           // the group's Work, where c10d makes one
  std::vector<WorkPtr> each;               // else each transfer's own, by position (1.13)
  bool ended = false;
};

namespace {

// A transfer of a group: completes with the group (Note [Grouped point-to-point]).
class GroupedWork final : public Work {
 public:
  GroupedWork(std::shared_ptr<C10dP2PGroup> group, std::size_t index)
      : group_(std::move(group)), index_(index) {}
  bool completed() override { return target().completed(); }
  void wait() override { target().wait(); }
  bool poll() override { return target().poll(); }

 private:
  Work& target() {
    // Communicator::batch_isend_irecv ends the group before it returns the Works.
    TORCH_INTERNAL_ASSERT(group_->ended, "a grouped transfer was waited on before its group was issued");
    if (group_->whole) return *group_->whole;
    const auto& own = group_->each[index_];
    if (!own) return *completed_work();
    return *own;
  }

  std::shared_ptr<C10dP2PGroup> group_;
  std::size_t index_;
};

}  // namespace

C10dCommunicator::C10dCommunicator(std::string backend, int rank, int size, std::chrono::milliseconds timeout,
                                   compat::StorePtr store, compat::GroupPtr group, GroupFactory factory,
                                   C10dCapabilities capabilities)
    : Communicator(rank, size, timeout),
      backend_(std::move(backend)),
      store_(std::move(store)),
      group_(std::move(group)),
      factory_(std::move(factory)),
      capabilities_(capabilities) {
  TORCH_INTERNAL_ASSERT(size == 1 || (store_ && group_), "a c10d communicator of ", size,
                        " ranks needs a group");
  TORCH_INTERNAL_ASSERT(factory_, "a c10d communicator needs a group factory for split()");
  TORCH_INTERNAL_ASSERT(capabilities_.wire_bytes, "a c10d communicator needs its backend's wire-byte model");
  if (capabilities_.device) set_home_device(*capabilities_.device);
}

C10dCommunicator::~C10dCommunicator() = default;

WorkPtr C10dCommunicator::wrap(compat::WorkHandle work, std::function<void()> finish, bool p2p) {
  TORCH_INTERNAL_ASSERT(work, backend_, " returned no Work");
  return std::make_shared<C10dWork>(
      std::move(work), timeout(), capabilities_.poll_wait, std::move(finish),
      p2p && !capabilities_.p2p_completes_without_wait);  // See Note [Gloo's send and recv]
}

void C10dCommunicator::check_reducible(const at::Tensor& tensor, ReduceOp op, const char* what) const {
  const auto& reduced = capabilities_.reduced_dtypes;
  if (!reduced.empty() && std::find(reduced.begin(), reduced.end(), tensor.scalar_type()) == reduced.end()) {
    std::vector<std::string> names;
    for (auto dtype : reduced) names.emplace_back(c10::toString(dtype));
    fail(what, fmt::format("{} reduces {}; found {}", backend_, fmt::join(names, ", "),
                           c10::toString(tensor.scalar_type())));
  }
  if (op == ReduceOp::Avg && !at::isFloatingType(tensor.scalar_type()) &&
      !at::isComplexType(tensor.scalar_type())) {
    fail(what,
         fmt::format("ReduceOp avg needs a floating-point tensor; found {}. Reduce with sum and divide, or "
                     "convert the tensor to a floating-point type first",
                     c10::toString(tensor.scalar_type())));
  }
}

WorkPtr C10dCommunicator::do_allreduce(const at::Tensor& tensor, ReduceOp op, bool async_op) {
  check_reducible(tensor, op, "allreduce");
  if (tensor.numel() == 0) return completed_work();
  if ((tensor.scalar_type() == at::kBFloat16 && !capabilities_.reduces_bfloat16) ||
      (tensor.scalar_type() == at::kHalf && !capabilities_.reduces_float16)) {
    return allreduce_by_exchange(tensor, op);
  }
  std::vector<at::Tensor> tensors{tensor};
  ::c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  options.timeout = timeout();
  auto work = call_c10d([&] { return group_->allreduce(tensors, options); });
  std::function<void()> finish;
  if (op == ReduceOp::Avg) finish = [tensor, n = size()] { tensor.div_(n); };
  return wrap(std::move(work), std::move(finish));
}

WorkPtr C10dCommunicator::allreduce_by_exchange(const at::Tensor& tensor, ReduceOp op) {
  // See Note [bfloat16 on Gloo].
  const int n = size();
  const std::int64_t numel = tensor.numel();
  const std::int64_t chunk = (numel + n - 1) / n;
  at::Tensor flat = tensor.view({-1});
  const bool padded = chunk * n != numel;
  at::Tensor buffer = padded ? at::zeros({chunk * n}, tensor.options()) : flat;
  if (padded) buffer.narrow(0, 0, numel).copy_(flat);
  at::Tensor received = at::empty({chunk * n}, tensor.options());
  {
    at::Tensor in = as_bytes(buffer);
    at::Tensor out = as_bytes(received);
    std::vector<int64_t> equal_splits;
    ::c10d::AllToAllOptions options;
    options.timeout = timeout();
    wrap(call_c10d([&] {
      return group_->alltoall_base(out, in, equal_splits, equal_splits, options);
    }))->wait();
  }
  at::Tensor reduced = at::empty({chunk}, tensor.options());
  reduce_rows(received.view({n, chunk}), reduced, op, n);
  {
    // The send buffer is free again: the reduced chunks gather into it.
    std::vector<at::Tensor> inputs{as_bytes(reduced)};
    std::vector<std::vector<at::Tensor>> outputs{as_bytes(buffer).split(chunk * tensor.element_size())};
    ::c10d::AllgatherOptions options;
    options.timeout = timeout();
    wrap(call_c10d([&] { return group_->allgather(outputs, inputs, options); }))->wait();
  }
  if (padded) flat.copy_(buffer.narrow(0, 0, numel));
  return completed_work();
}

WorkPtr C10dCommunicator::do_allgather(const at::Tensor& input, const at::Tensor& output, bool async_op) {
  if (input.numel() == 0) return completed_work();
  at::Tensor in = as_bytes(input);
  at::Tensor out = as_bytes(output);
  if (capabilities_.allgather) {
    auto work = call_c10d(
        [&] { return capabilities_.allgather(*group_, in, out, ReduceOp::Sum, async_op, timeout()); });
    return work ? wrap(std::move(work)) : completed_work();
  }
  ::c10d::AllgatherOptions options;
  options.timeout = timeout();
  if (capabilities_.flat_collectives) {
    return wrap(call_c10d([&] { return group_->_allgather_base(out, in, options); }));
  }
  std::vector<at::Tensor> inputs{in};
  std::vector<std::vector<at::Tensor>> outputs{out.split(in.numel())};  // See Note [Emulated collectives]
  return wrap(call_c10d([&] { return group_->allgather(outputs, inputs, options); }));
}

WorkPtr C10dCommunicator::do_broadcast(const at::Tensor& tensor, int root, bool async_op) {
  if (tensor.numel() == 0) return completed_work();
  std::vector<at::Tensor> tensors{as_bytes(tensor)};
  ::c10d::BroadcastOptions options;
  options.rootRank = root;
  options.timeout = timeout();
  return wrap(call_c10d([&] { return group_->broadcast(tensors, options); }));
}

WorkPtr C10dCommunicator::do_reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                            bool async_op) {
  check_reducible(input, op, "reduce_scatter");
  if (output.numel() == 0) return completed_work();
  const int n = size();
  if (capabilities_.reduce_scatter) {
    auto work = call_c10d(
        [&] { return capabilities_.reduce_scatter(*group_, input, output, op, async_op, timeout()); });
    if (!work) {
      if (op == ReduceOp::Avg) output.div_(n);
      return completed_work();
    }
    std::function<void()> finish;
    if (op == ReduceOp::Avg) finish = [output, n] { output.div_(n); };
    return wrap(std::move(work), std::move(finish));
  }
  if (capabilities_.flat_collectives) {
    at::Tensor in = input.view({-1});
    at::Tensor out = output.view({-1});
    ::c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op);
    options.timeout = timeout();
    std::function<void()> finish;
    if (op == ReduceOp::Avg) finish = [output, n] { output.div_(n); };
    return wrap(call_c10d([&] { return group_->_reduce_scatter_base(out, in, options); }), std::move(finish));
  }
  // See Note [Emulated collectives]: an alltoall, then a local reduction over the n chunks.
  at::Tensor received = at::empty({input.numel()}, input.options());
  at::Tensor received_bytes = as_bytes(received);
  at::Tensor input_bytes = as_bytes(input);
  std::vector<int64_t> equal_splits;
  ::c10d::AllToAllOptions options;
  options.timeout = timeout();
  auto work = call_c10d([&] {
    return group_->alltoall_base(received_bytes, input_bytes, equal_splits, equal_splits, options);
  });
  auto finish = [received, output, op, n] { reduce_rows(received.view({n, -1}), output, op, n); };
  return wrap(std::move(work), std::move(finish));
}

WorkPtr C10dCommunicator::do_alltoall(const at::Tensor& input, const at::Tensor& output, bool async_op) {
  if (input.numel() == 0) return completed_work();
  at::Tensor in = as_bytes(input);
  at::Tensor out = as_bytes(output);
  std::vector<int64_t> equal_splits;
  ::c10d::AllToAllOptions options;
  options.timeout = timeout();
  return wrap(call_c10d([&] { return group_->alltoall_base(out, in, equal_splits, equal_splits, options); }));
}

WorkPtr C10dCommunicator::do_send(const at::Tensor& tensor, int dst, int tag, bool async_op) {
  if (tensor.numel() == 0) return completed_work();
  std::vector<at::Tensor> tensors{as_bytes(tensor)};
  if (p2p_group_) return batched(call_c10d([&] { return group_->send(tensors, dst, tag); }));
  return wrap(call_c10d([&] { return group_->send(tensors, dst, tag); }), {}, async_op);
}

WorkPtr C10dCommunicator::do_recv(const at::Tensor& tensor, int src, int tag, bool async_op) {
  if (tensor.numel() == 0) return completed_work();
  std::vector<at::Tensor> tensors{as_bytes(tensor)};
  if (p2p_group_) return batched(call_c10d([&] { return group_->recv(tensors, src, tag); }));
  return wrap(call_c10d([&] { return group_->recv(tensors, src, tag); }), {}, async_op);
}

// See Note [Grouped point-to-point].
void C10dCommunicator::begin_p2p_batch() {
  if (!capabilities_.groups_p2p) return;
  TORCH_INTERNAL_ASSERT(!p2p_group_, "point-to-point batches do not nest");
  call_c10d([&] { group_->startCoalescing(); });
  p2p_group_ = std::make_shared<C10dP2PGroup>();
}

void C10dCommunicator::end_p2p_batch() {
  if (!p2p_group_) return;
  auto group = std::move(p2p_group_);
  p2p_group_.reset();
  auto whole = call_c10d([&] { return compat::end_coalescing(*group_, group->issued); });
  if (whole) {
    group->whole = wrap(std::move(whole), {}, /*p2p=*/true);
  } else {
    for (auto& work : group->issued) group->each.push_back(work ? wrap(work, {}, /*p2p=*/true) : WorkPtr());
  }
  group->issued.clear();
  group->ended = true;
}

WorkPtr C10dCommunicator::batched(compat::WorkHandle work) {
  p2p_group_->issued.push_back(std::move(work));
  return std::make_shared<GroupedWork>(p2p_group_, p2p_group_->issued.size() - 1);
}

WorkPtr C10dCommunicator::do_barrier(bool async_op) {
  ::c10d::BarrierOptions options;
  options.timeout = timeout();
  return wrap(call_c10d([&] { return group_->barrier(options); }));
}

std::uint64_t C10dCommunicator::wire_bytes(const WireCall& call) const {
  // Operations on empty tensors return before reaching the group.
  if (call.numel == 0 && call.op != CommOp::Barrier) return 0;
  WireCall ran = call;
  const bool exchanged =
      (call.bfloat16 && !capabilities_.reduces_bfloat16) || (call.float16 && !capabilities_.reduces_float16);
  if (call.op == CommOp::Allreduce && exchanged) {
    // See Note [bfloat16 on Gloo]: an alltoall of n equal chunks, then an all-gather of one.
    const std::int64_t chunk = (call.numel + size() - 1) / size();
    ran.op = CommOp::Alltoall;
    ran.numel = chunk * size();
    WireCall gather = call;
    gather.op = CommOp::Allgather;
    gather.numel = chunk;
    return capabilities_.wire_bytes(ran, rank(), size()) + capabilities_.wire_bytes(gather, rank(), size());
  }
  // See Note [Emulated collectives].
  if (call.op == CommOp::ReduceScatter && !capabilities_.flat_collectives && !capabilities_.reduce_scatter) {
    ran.op = CommOp::Alltoall;
  }
  return capabilities_.wire_bytes(ran, rank(), size());
}

std::vector<std::string> C10dCommunicator::exchange_reports(const std::string& report,
                                                            std::chrono::milliseconds grace) {
  if (!store_) return {};
  const int generation = reports_++;
  auto key = [generation](int r) { return fmt::format("dtrain/flight/{}/{}", generation, r); };
  store_->set(key(rank()), std::vector<std::uint8_t>(report.begin(), report.end()));
  std::vector<std::string> reports(static_cast<std::size_t>(size()));
  reports[static_cast<std::size_t>(rank())] = report;
  std::vector<bool> have(static_cast<std::size_t>(size()), false);
  have[static_cast<std::size_t>(rank())] = true;
  // Polled rather than Store::wait(): that would throw at the first missing key, and the point is
  // to learn which ranks are missing.
  const auto until = std::chrono::steady_clock::now() + grace;
  for (;;) {
    bool all = true;
    for (int r = 0; r < size(); ++r) {
      if (have[r]) continue;
      if (store_->check({key(r)})) {
        const auto value = store_->get(key(r));
        reports[r].assign(value.begin(), value.end());
        have[r] = true;
      } else {
        all = false;
      }
    }
    if (all || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return reports;
}

std::unique_ptr<Communicator> C10dCommunicator::do_split(const std::vector<int>& ranks) {
  const auto split_id = splits_++;
  const auto position = std::find(ranks.begin(), ranks.end(), rank());
  if (position == ranks.end()) return nullptr;
  const int sub_rank = static_cast<int>(position - ranks.begin());
  const int sub_size = static_cast<int>(ranks.size());
  if (sub_size == 1) {
    return std::make_unique<C10dCommunicator>(backend_, 0, 1, timeout(), compat::StorePtr(),
                                              compat::GroupPtr(), factory_, capabilities_);
  }
  // The rank list is part of the key so that ranks that disagree on it fail to meet instead of
  // forming a wrong group.
  auto sub_store = c10::make_intrusive<::c10d::PrefixStore>(
      fmt::format("split/{}/{}", split_id, fmt::join(ranks, ",")), store_);
  compat::GroupPtr group = call_c10d([&] { return factory_(sub_store, sub_rank, sub_size); });
  return std::make_unique<C10dCommunicator>(backend_, sub_rank, sub_size, timeout(), std::move(sub_store),
                                            std::move(group), factory_, capabilities_);
}

}  // namespace dtrain::comm
