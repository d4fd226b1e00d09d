// The communicator's collectives and point-to-point calls: each checks its arguments against its
// row of kCollectives (Note [One row per operation] in Collectives.h), names itself for the
// collective checks (Note [Collective checks]) and the flight recorder, and hands the call to the
// backend through track(); split() makes a subgroup.
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/comm/Communicator.h"
#include "dtrain/util/Clock.h"

namespace dtrain::comm {

namespace {

using util::Clock;
using util::seconds_since;

std::uint64_t nbytes(const at::Tensor& t) {
  return static_cast<std::uint64_t>(t.numel()) * t.element_size();
}

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
  // MPI forbids it, and gloo's ring writes the output before it has read the whole input.
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  if (a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes()) {
    throw CommError(c.rank(), c.size(), op, "output overlaps input; give the output memory of its own");
  }
}

void check_peer(const Communicator& c, int peer, const char* op, const char* what) {
  if (peer < 0 || peer >= c.size()) {
    throw CommError(c.rank(), c.size(), op, fmt::format("{} {} is outside [0, {})", what, peer, c.size()));
  }
}

// The element counts row.tensors asks of an input and an output.
void check_sizes(const Communicator& c, const CollectiveInfo& row, const at::Tensor& input,
                 const at::Tensor& output) {
  const std::int64_t n = c.size();
  std::string error;
  if (row.tensors == TensorShape::GatherInto && output.numel() != input.numel() * n) {
    error = fmt::format("output has {} elements; expected world size {} x input's {}", output.numel(), n,
                        input.numel());
  } else if (row.tensors == TensorShape::ScatterFrom && input.numel() != output.numel() * n) {
    error = fmt::format("input has {} elements; expected world size {} x output's {}", input.numel(), n,
                        output.numel());
  } else if (row.tensors == TensorShape::EqualChunks &&
             (input.numel() != output.numel() || input.numel() % n != 0)) {
    error = fmt::format(
        "input ({}) and output ({}) must have the same number of elements, divisible by world size {}",
        input.numel(), output.numel(), n);
  }
  if (!error.empty()) throw CommError(c.rank(), c.size(), row.name, error);
}

// What `row` asks of a call's tensors (`output` null for one in place) and its peer, in the order
// a caller meets the errors: each tensor, the two against each other, their sizes, the peer.
void check_call(const Communicator& c, const CollectiveInfo& row, const at::Tensor* input,
                const at::Tensor* output, int peer = -1) {
  if (input && !output) check_tensor(c, *input, row.name, "tensor");
  if (input && output) {
    check_tensor(c, *input, row.name, "input");
    check_tensor(c, *output, row.name, "output");
    check_same(c, *input, *output, row.name);
    check_sizes(c, row, *input, *output);
  }
  if (row.peer) {
    check_peer(c, peer, row.name, row.peer);
    if (!row.collective && peer == c.rank()) {
      throw CommError(c.rank(), c.size(), row.name, fmt::format("{} is this rank itself", row.peer));
    }
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
  call.float16 = t.scalar_type() == at::kHalf;
  return call;
}

}  // namespace

WorkPtr Communicator::allreduce(const at::Tensor& tensor, ReduceOp op, bool async_op) {
  constexpr CommOp kOp = CommOp::Allreduce;
  check_call(*this, collective_info(kOp), &tensor, nullptr);
  if (size_ == 1) return completed_work();
  return track(fingerprint(kOp, &tensor, -1, static_cast<int>(op)), nbytes(tensor),
               wire_bytes_of(wire_call(kOp, tensor, async_op)), async_op, [&] {
                 if (!staging_device(tensor)) return do_allreduce(tensor, op, async_op);
                 Staging s;
                 const auto t = stage(tensor, true, true, s);
                 return staged(do_allreduce(t, op, async_op), std::move(s));
               });
}

WorkPtr Communicator::allgather(const at::Tensor& input, const at::Tensor& output, bool async_op) {
  constexpr CommOp kOp = CommOp::Allgather;
  check_call(*this, collective_info(kOp), &input, &output);
  if (size_ == 1) {
    output.view({-1}).copy_(input.view({-1}));
    return completed_work();
  }
  return track(fingerprint(kOp, &input), nbytes(output), wire_bytes_of(wire_call(kOp, input, async_op)),
               async_op, [&] {
                 if (!staging_device(input) && !staging_device(output))
                   return do_allgather(input, output, async_op);
                 Staging s;
                 const auto in = stage(input, true, false, s);
                 const auto out = stage(output, false, true, s);
                 return staged(do_allgather(in, out, async_op), std::move(s));
               });
}

WorkPtr Communicator::broadcast(const at::Tensor& tensor, int root, bool async_op) {
  constexpr CommOp kOp = CommOp::Broadcast;
  check_call(*this, collective_info(kOp), &tensor, nullptr, root);
  if (size_ == 1) return completed_work();
  return track(fingerprint(kOp, &tensor, root), nbytes(tensor),
               wire_bytes_of(wire_call(kOp, tensor, async_op, root)), async_op, [&] {
                 if (!staging_device(tensor)) return do_broadcast(tensor, root, async_op);
                 Staging s;
                 const auto t = stage(tensor, rank_ == root, rank_ != root, s);
                 return staged(do_broadcast(t, root, async_op), std::move(s));
               });
}

WorkPtr Communicator::reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                     bool async_op) {
  constexpr CommOp kOp = CommOp::ReduceScatter;
  check_call(*this, collective_info(kOp), &input, &output);
  if (size_ == 1) {
    output.view({-1}).copy_(input.view({-1}));
    return completed_work();
  }
  return track(fingerprint(kOp, &input, -1, static_cast<int>(op)), nbytes(input),
               wire_bytes_of(wire_call(kOp, input, async_op)), async_op, [&] {
                 if (!staging_device(input) && !staging_device(output)) {
                   return do_reduce_scatter(input, output, op, async_op);
                 }
                 Staging s;
                 const auto in = stage(input, true, false, s);
                 const auto out = stage(output, false, true, s);
                 return staged(do_reduce_scatter(in, out, op, async_op), std::move(s));
               });
}

WorkPtr Communicator::alltoall(const at::Tensor& input, const at::Tensor& output, bool async_op) {
  constexpr CommOp kOp = CommOp::Alltoall;
  check_call(*this, collective_info(kOp), &input, &output);
  if (size_ == 1) {
    output.view({-1}).copy_(input.view({-1}));
    return completed_work();
  }
  return track(fingerprint(kOp, &input), nbytes(input), wire_bytes_of(wire_call(kOp, input, async_op)),
               async_op, [&] {
                 if (!staging_device(input) && !staging_device(output))
                   return do_alltoall(input, output, async_op);
                 Staging s;
                 const auto in = stage(input, true, false, s);
                 const auto out = stage(output, false, true, s);
                 return staged(do_alltoall(in, out, async_op), std::move(s));
               });
}

WorkPtr Communicator::send(const at::Tensor& tensor, int dst, int tag, bool async_op) {
  constexpr CommOp kOp = CommOp::Send;
  check_call(*this, collective_info(kOp), &tensor, nullptr, dst);
  return track(fingerprint(kOp, &tensor, dst), nbytes(tensor),
               wire_bytes_of(wire_call(kOp, tensor, async_op)), async_op, [&] {
                 if (!staging_device(tensor)) return do_send(tensor, dst, tag, async_op);
                 Staging s;
                 const auto t = stage(tensor, true, false, s);
                 return staged(do_send(t, dst, tag, async_op), std::move(s));
               });
}

WorkPtr Communicator::recv(const at::Tensor& tensor, int src, int tag, bool async_op) {
  constexpr CommOp kOp = CommOp::Recv;
  check_call(*this, collective_info(kOp), &tensor, nullptr, src);
  return track(fingerprint(kOp, &tensor, src), nbytes(tensor),
               wire_bytes_of(wire_call(kOp, tensor, async_op)), async_op, [&] {
                 if (!staging_device(tensor)) return do_recv(tensor, src, tag, async_op);
                 Staging s;
                 const auto t = stage(tensor, false, true, s);
                 return staged(do_recv(t, src, tag, async_op), std::move(s));
               });
}

std::vector<WorkPtr> Communicator::batch_isend_irecv(const std::vector<P2POp>& ops) {
  std::vector<WorkPtr> works;
  works.reserve(ops.size());
  if (ops.empty()) return works;
  const bool grouped = size_ > 1;
  if (grouped) begin_p2p_batch();
  try {
    for (const auto& op : ops) {
      works.push_back(op.kind == P2POp::Kind::Send ? send(op.tensor, op.peer, op.tag, /*async_op=*/true)
                                                   : recv(op.tensor, op.peer, op.tag, /*async_op=*/true));
    }
  } catch (...) {
    // The transfer's own error is the one to report; ending the group only closes it.
    if (grouped) {
      try {
        end_p2p_batch();
      } catch (...) {
      }
    }
    throw;
  }
  if (grouped) end_p2p_batch();
  return works;
}

WorkPtr Communicator::barrier(bool async_op) {
  if (size_ == 1) return completed_work();
  WireCall call;
  call.async_op = async_op;
  return track(fingerprint(CommOp::Barrier, nullptr), 0, wire_bytes_of(call), async_op,
               [&] { return do_barrier(async_op); });
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& ranks) {
  const CollectiveInfo& row = collective_info(CommOp::Split);
  if (ranks.empty()) fail(row.name, "the rank list is empty");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    check_peer(*this, ranks[i], row.name, row.peer);
    if (i > 0 && ranks[i] <= ranks[i - 1]) fail(row.name, "ranks must be sorted and distinct");
  }
  // Every rank of this communicator takes part, so a split counts as a collective; its fingerprint
  // carries the number of ranks in the list (not the list itself).
  CallFingerprint call = fingerprint(CommOp::Split, nullptr);
  call.numel = static_cast<std::int64_t>(ranks.size());
  const auto t0 = Clock::now();
  const std::size_t slot = recorder_.start(call);
  try {
    if (debug_ == DebugMode::Detail && size_ > 1) check_fingerprint(call);
    auto child = do_split(ranks);
    if (child) child->set_debug(debug_);
    recorder_.finish(slot, true);
    return child;
  } catch (const CommError&) {
    recorder_.finish(slot, false);
    throw;
  } catch (const std::exception& e) {
    const auto report = failure_report(e.what(), seconds_since(t0));
    recorder_.finish(slot, false);
    fail(row.name, e.what() + report);
  }
}

}  // namespace dtrain::comm
