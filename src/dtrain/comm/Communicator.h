// Communicator: how one rank talks to the others. Collectives and point-to-point transfers over
// a swappable backend (gloo, mpi, nccl), each returning a Work; every call is validated, counted
// in CommStats and, when it fails, reported with the rank and the operation.
//
// Semantics follow torch.distributed: operations are in place on dense contiguous tensors, every
// rank calls the same collectives in the same order, and with async_op = false the call returns
// only when the operation has finished on this rank (the returned Work is then complete).
// Operations are issued by one thread at a time (every rank must issue the same collectives in
// the same order, which threads racing to issue them could not promise); a Work may be waited on
// from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/util/FunctionRef.h>
#include <array>
#include <chrono>
#include <cstdint>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/Collectives.h"
#include "dtrain/comm/CommStats.h"
#include "dtrain/comm/FlightRecorder.h"
#include "dtrain/comm/ReduceOp.h"
#include "dtrain/comm/WireBytes.h"
#include "dtrain/comm/Work.h"

namespace dtrain::comm {

// parallel.debug: off runs collectives as they are; detail compares every collective's
// fingerprint between ranks first (Note [Collective checks] in Communicator.cpp).
enum class DebugMode { Off, Detail };

// One transfer of Communicator::batch_isend_irecv (torch.distributed.P2POp).
struct P2POp {
  enum class Kind { Send, Recv };
  Kind kind = Kind::Send;
  at::Tensor tensor;
  int peer = 0;
  int tag = 0;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "gloo", "mpi" or "nccl".
  virtual std::string backend() const = 0;

  // In place: every rank ends with the reduction of all ranks' tensors.
  WorkPtr allreduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::Sum, bool async_op = false);
  // output (flat, size() * input.numel() elements) receives rank r's input at [r*n, (r+1)*n).
  WorkPtr allgather(const at::Tensor& input, const at::Tensor& output, bool async_op = false);
  // In place: every rank ends with root's tensor.
  WorkPtr broadcast(const at::Tensor& tensor, int root, bool async_op = false);
  // input holds size() equal chunks; output (one chunk) receives the reduction of chunk rank().
  WorkPtr reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op = ReduceOp::Sum,
                         bool async_op = false);
  // input and output hold size() equal chunks; chunk j of input goes to rank j, and chunk i of
  // output comes from rank i.
  WorkPtr alltoall(const at::Tensor& input, const at::Tensor& output, bool async_op = false);
  WorkPtr send(const at::Tensor& tensor, int dst, int tag = 0, bool async_op = false);
  WorkPtr recv(const at::Tensor& tensor, int src, int tag = 0, bool async_op = false);
  WorkPtr barrier(bool async_op = false);
  // Posts every transfer of `ops` together and returns their Works in the same order, as
  // torch.distributed.batch_isend_irecv. A backend that runs point-to-point messages in the order
  // they are posted (nccl) issues the batch as one group, so that ranks which each post their
  // receives before their sends do not wait on one another; the others post them one by one.
  // Each transfer is validated, counted and recorded as the send or recv it is.
  std::vector<WorkPtr> batch_isend_irecv(const std::vector<P2POp>& ops);

  // A communicator over a subset of this one's ranks (sorted, distinct, each in [0, size())),
  // numbered by their position in `ranks`. Collective: every rank of this communicator calls it
  // with the same list, in the same order as its other collectives; ranks outside the list get
  // nullptr. Used for graph neighbourhoods, pipeline stages and shard groups.
  std::unique_ptr<Communicator> split(const std::vector<int>& ranks);

  // Where this backend would carry `tensor` for a call (Note [Tensors on another device]): nullopt
  // where it lives, else the backend's device, where a copy of it goes.
  std::optional<at::Device> staging_device(const at::Tensor& tensor) const {
    if (!stage_everything_ && tensor.device() == home_) return std::nullopt;
    return home_;
  }

  CommStats stats() const { return stats_.snapshot(); }
  void reset_stats() { stats_.reset(); }

  // See Note [Collective checks]. Communicators made by split() inherit the mode.
  void set_debug(DebugMode mode) { debug_ = mode; }
  DebugMode debug() const { return debug_; }
  // The last operations of this communicator (always kept; Note [Flight recorder]).
  const FlightRecorder& flight_recorder() const { return recorder_; }

 protected:
  Communicator(int rank, int size, std::chrono::milliseconds timeout);

  // Backends implement these. Arguments are already validated (dense, contiguous, matching
  // dtypes and sizes, ranks in range) and size() > 1. With async_op = false a backend may run the
  // operation inline; either way the returned Work must be completable by wait(). A blocking call
  // that has already finished may return an empty WorkPtr instead (no handle to count and drop).
  virtual WorkPtr do_allreduce(const at::Tensor& tensor, ReduceOp op, bool async_op) = 0;
  virtual WorkPtr do_allgather(const at::Tensor& input, const at::Tensor& output, bool async_op) = 0;
  virtual WorkPtr do_broadcast(const at::Tensor& tensor, int root, bool async_op) = 0;
  virtual WorkPtr do_reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                                    bool async_op) = 0;
  virtual WorkPtr do_alltoall(const at::Tensor& input, const at::Tensor& output, bool async_op) = 0;
  virtual WorkPtr do_send(const at::Tensor& tensor, int dst, int tag, bool async_op) = 0;
  virtual WorkPtr do_recv(const at::Tensor& tensor, int src, int tag, bool async_op) = 0;
  virtual WorkPtr do_barrier(bool async_op) = 0;
  // Around the do_send and do_recv calls of one batch_isend_irecv (size() > 1, at least one
  // transfer). A backend that groups point-to-point messages opens the group in begin and issues
  // it in end; the Works do_send and do_recv returned in between complete with the group. end is
  // called even when a transfer of the batch threw.
  virtual void begin_p2p_batch() {}
  virtual void end_p2p_batch() {}
  // Called on every rank; `ranks` is validated. Returns nullptr where rank() is not in ranks.
  virtual std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) = 0;
  // The bytes this rank puts on the wire for `call` under the algorithm the backend runs for it
  // (see Note [Wire bytes]); a function of the call, this rank and the world size only, since
  // the Communicator remembers its last answer for each operation (wire_bytes_of).
  virtual std::uint64_t wire_bytes(const WireCall& call) const = 0;

  // Throws CommError for this rank and op.
  [[noreturn]] void fail(const std::string& op, const std::string& detail) const;

  // See Note [Flight recorder]: publishes this rank's report where the other ranks of this
  // communicator can read it, waits up to `grace` for theirs, and returns every rank's by rank
  // ("" for a rank that published none by then). A backend without a store returns nothing: the
  // report then speaks for this rank only.
  virtual std::vector<std::string> exchange_reports(const std::string& report,
                                                    std::chrono::milliseconds grace);

  // See Note [Tensors on another device]: where the backend carries tensors, set by its
  // constructor; the CPU unless set (gloo, mpi, the test communicators); nccl: its GPU.
  void set_home_device(at::Device device) { home_ = device; }
  // Tests on a machine without a second device: copy even the tensors already at home.
  bool stage_everything_ = false;

 public:
  // What a failed operation's error adds after its cause: "" unless the operation timed out
  // (elapsed_seconds near the timeout, or the cause says so); then every rank's flight-recorder
  // report. Used by the communicator's Work handles.
  std::string failure_report(const std::string& cause, double elapsed_seconds);

 private:
  WorkPtr track(const CallFingerprint& call, std::uint64_t bytes, std::uint64_t wire_bytes, bool async_op,
                c10::function_ref<WorkPtr()> start);
  // The call as kCollectives' row for `op` names it; a collective gets the next number on this
  // communicator. `peer` is broadcast's root or send's and recv's peer.
  CallFingerprint fingerprint(CommOp op, const at::Tensor* tensor, int peer = -1, int reduce = -1);
  // wire_bytes(call), remembered for the last call of each operation: a backend's model (OpenMPI's
  // algorithm choice, for one) is worth not re-deriving for the same call again and again.
  std::uint64_t wire_bytes_of(const WireCall& call);
  // parallel.debug: detail; throws CommError on every rank when the ranks' calls differ.
  void check_fingerprint(const CallFingerprint& call);

  // Note [Tensors on another device]: what the backend is handed for one call's tensors, and what
  // is copied back into the caller's tensors when the call completes.
  struct Staging {
    std::vector<at::Tensor> held;                            // copies the backend works on
    std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (caller's tensor, copy) to copy back
  };
  // `tensor` itself, or a copy on staging_device(tensor) (holding its values when `read`), copied
  // back into `tensor` when the call completes when `written`.
  at::Tensor stage(const at::Tensor& tensor, bool read, bool written, Staging& staging) const;
  // The backend's Work for a call staged through `staging`: itself when nothing was staged.
  static WorkPtr staged(WorkPtr work, Staging&& staging);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  at::Device home_{at::kCPU};
  mutable CommStatsRecorder stats_;
  DebugMode debug_ = DebugMode::Off;
  FlightRecorder recorder_;
  std::int64_t collectives_ = 0;  // issued on this communicator; the next one is #collectives_ + 1
  struct WireMemo {
    WireCall call;
    std::uint64_t bytes = 0;
    bool known = false;
  };
  std::array<WireMemo, kCollectives.size()> wire_memo_{};  // by CommOp
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

}  // namespace dtrain::comm
