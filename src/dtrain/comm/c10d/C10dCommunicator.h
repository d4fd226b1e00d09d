// A Communicator over any c10d process group (ProcessGroupGloo, ProcessGroupNCCL): maps dtrain's
// operations onto c10d's, emulates what a backend lacks (Avg, flat allgather, reduce_scatter, the
// bfloat16 all-reduce), and builds subgroups through the store the group was made from.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/Communicator.h"

namespace dtrain::comm {

// A collective a backend runs itself on its own process group instead of through c10d (gloo's
// reduce_scatter and flat allgather, Note [Gloo's native collectives]). With async_op = false it
// runs inline and returns an empty handle; otherwise it returns the c10d Work it queued.
using NativeCollective = std::function<compat::WorkHandle(
    compat::CollectiveGroup& group, const at::Tensor& input, const at::Tensor& output, ReduceOp op,
    bool async_op, std::chrono::milliseconds timeout)>;

// What a c10d backend does natively (everything else is emulated), and what its algorithms send.
struct C10dCapabilities {
  // _allgather_base and _reduce_scatter_base on flat tensors (NCCL; not Gloo in 1.13).
  bool flat_collectives = false;
  // Work::isCompleted() becomes true for send/recv without anyone waiting (not Gloo's).
  bool p2p_completes_without_wait = true;
  // The dtypes allreduce and reduce_scatter reduce; others are refused naming them, before anything
  // is sent. Empty: whatever the c10d group accepts. Declared where c10d's set moved between
  // LibTorch versions (Gloo reduces bool and complex from some 2.x on, not in 1.13), so that a job
  // behaves the same on every LibTorch.
  std::vector<at::ScalarType> reduced_dtypes;
  // Reduces bfloat16 natively (NCCL). Otherwise an all-reduce of bfloat16 is an exchange of the
  // 16-bit payloads around a float32 reduction; see Note [bfloat16 on Gloo].
  bool reduces_bfloat16 = true;
  // Reduces float16 natively; otherwise as bfloat16 above (ProcessGroupGloo of LibTorch 2.x built
  // against a Gloo without torch's types: gloo_reduces_float16()).
  bool reduces_float16 = true;
  // Runs point-to-point messages in the order they are posted, so that two ranks which each
  // receive before they send wait on each other (NCCL): batch_isend_irecv issues its transfers as
  // one group (startCoalescing ... endCoalescing, NCCL's ncclGroupStart ... ncclGroupEnd).
  bool groups_p2p = false;
  // How long Work::wait() polls isCompleted(), yielding the core between polls, before it blocks.
  // See Note [Polling before blocking] in C10dCommunicator.cpp.
  std::chrono::microseconds poll_wait{0};
  // The bytes rank `rank` of `size` sends for a call the backend runs natively (an emulated
  // reduce_scatter is asked as the alltoall it runs). See Note [Wire bytes].
  std::function<std::uint64_t(const WireCall& call, int rank, int size)> wire_bytes;
  // Set: the backend's own reduce_scatter (every op) and flat allgather (op unused), run instead of
  // c10d's or the emulation; wire_bytes is then asked about them as they are.
  NativeCollective reduce_scatter;
  NativeCollective allgather;
  // Where the backend carries tensors: unset for host memory (Gloo), its GPU for NCCL. Tensors
  // elsewhere are copied there and back (Note [Tensors on another device] in Communicator.cpp).
  std::optional<at::Device> device;
};

// Builds the process group of `size` ranks meeting through `store`; used for the world and for
// every split.
using GroupFactory = std::function<compat::GroupPtr(const compat::StorePtr& store, int rank, int size)>;

class C10dCommunicator final : public Communicator {
 public:
  // size == 1 needs neither store nor group (every operation is local); otherwise both are set.
  C10dCommunicator(std::string backend, int rank, int size, std::chrono::milliseconds timeout,
                   compat::StorePtr store, compat::GroupPtr group, GroupFactory factory,
                   C10dCapabilities capabilities);
  ~C10dCommunicator() override;

  std::string backend() const override { return backend_; }

 protected:
  WorkPtr do_allreduce(const at::Tensor& tensor, ReduceOp op, bool async_op) override;
  WorkPtr do_allgather(const at::Tensor& input, const at::Tensor& output, bool async_op) override;
  WorkPtr do_broadcast(const at::Tensor& tensor, int root, bool async_op) override;
  WorkPtr do_reduce_scatter(const at::Tensor& input, const at::Tensor& output, ReduceOp op,
                            bool async_op) override;
  WorkPtr do_alltoall(const at::Tensor& input, const at::Tensor& output, bool async_op) override;
  WorkPtr do_send(const at::Tensor& tensor, int dst, int tag, bool async_op) override;
  WorkPtr do_recv(const at::Tensor& tensor, int src, int tag, bool async_op) override;
  WorkPtr do_barrier(bool async_op) override;
  void begin_p2p_batch() override;
  void end_p2p_batch() override;
  std::unique_ptr<Communicator> do_split(const std::vector<int>& ranks) override;
  std::uint64_t wire_bytes(const WireCall& call) const override;
  // Through the store the group was made from (Note [Flight recorder]).
  std::vector<std::string> exchange_reports(const std::string& report,
                                            std::chrono::milliseconds grace) override;

 private:
  WorkPtr wrap(compat::WorkHandle work, std::function<void()> finish = {}, bool p2p = false);
  void check_reducible(const at::Tensor& tensor, ReduceOp op, const char* what) const;
  // A send or recv inside a batch (groups_p2p): its c10d Work, kept until the group is issued.
  WorkPtr batched(compat::WorkHandle work);
  // See Note [bfloat16 on Gloo].
  WorkPtr allreduce_by_exchange(const at::Tensor& tensor, ReduceOp op);

  std::string backend_;
  compat::StorePtr store_;
  compat::GroupPtr group_;
  GroupFactory factory_;
  C10dCapabilities capabilities_;
  // The group of point-to-point transfers being posted (groups_p2p), between begin_p2p_batch and
  // end_p2p_batch; null otherwise.
  std::shared_ptr<struct C10dP2PGroup> p2p_group_;
  // Every rank counts its splits, members or not, so the n-th split has the same store keys everywhere.
  std::uint64_t splits_ = 0;
  // Failure reports exchanged so far: the n-th report of every rank has its own keys.
  int reports_ = 0;
};

}  // namespace dtrain::comm
