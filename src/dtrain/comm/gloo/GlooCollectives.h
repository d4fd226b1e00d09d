// The gloo backend's own process group: c10d's ProcessGroupGloo with access to its Gloo context,
// so that reduce_scatter and the flat allgather run on Gloo directly instead of through c10d's
// emulations. See Note [Gloo's native collectives].
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/ReduceOp.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace dtrain::comm {

// Note [Gloo's native collectives]
// LibTorch 1.13's ProcessGroupGloo has neither reduce_scatter nor _allgather_base, and its
// allgather gathers into a buffer of its own and copies that into the caller's chunk views. Both
// are collectives Gloo itself can run on the group's context, which c10d keeps protected; this
// subclass hands it out, with c10d's own collective tag, so that our operations and c10d's never
// share a Gloo slot.
// - reduce_scatter: a ring over Gloo's unbound buffers (n-1 steps; at step s rank r sends the
//   partial sum of chunk (r-s-1) mod n to r+1 and adds its own chunk (r-s-2) mod n to what r-1
//   sent; after the last step chunk r is complete). Each rank sends (n-1)/n of its input, as an
//   alltoall would, without an alltoall's temporary of the input's size. Gloo's library has
//   ReduceScatterHalvingDoubling, but it binds its buffers when it is built (registration and a
//   handshake per pair): worth it for one buffer reduced many times, as Gloo's benchmarks do, not
//   for a fresh tensor per call. The ring is what NCCL and Horovod run and what our wire-byte
//   model already counted. Partial sums of 16-bit floats are rounded at each hop, as in any ring.
// - allgather: gloo::allgather (the ring c10d's allgather runs) writing straight into the flat
//   output: no copy, same bytes.
// Both run on c10d's worker threads like any c10d collective, blocking calls too, and the caller
// waits by polling (Note [Polling before blocking] in C10dCommunicator.cpp). Run inline on the
// caller's thread instead, a blocking call sleeps in Gloo's waitRecv (Gloo has no test for an
// unbound buffer's receive, and a waitRecv that times out closes every pair) until Gloo's device
// thread wakes it, and on busy cores each such wake-up costs more than the hand-off to a worker
// saves. Where ranks do nothing but communicate, this reduce_scatter is slower than Gloo's
// halving-doubling run inline, mostly because the polling caller takes a core from this rank's
// worker and device threads and from the peer's (such a job can set parallel.poll_wait_us: 0); the
// hand-off itself is small. In training, where ranks compute between calls, queued and polled wins.
// c10d Gloo's own reduce_scatter (PyTorch 2.3 on: the input cloned and all-reduced on its worker
// thread) is slower than this ring at every size (bench/gloo_compare.cpp measures both).
// Measured (2-vCPU VM, dAD on an mlp, 2 ranks): 15.3-16.4k samples/s inline, 27.8-29.9k queued.
// Note [Cached Gloo buffers]
// Creating a native collective's Gloo unbound buffers (the input's, the output's, the ring's
// partial sums) and allocating the ring's scratch on every call would cost object set-up and, for
// a large scratch, a fresh mapping and its page faults. A GlooGroup keeps them instead, so that a
// repeated call of the same size creates and allocates nothing:
// - unbound buffers are keyed by (context, address, bytes) and lent out one call at a time (a
//   buffer counts its own send and receive completions, so two collectives running at once on c10d's
//   worker threads never share one: the second gets a new one). A TCP unbound buffer is only
//   (address, size) plus those counters, so a tensor freed and another allocated at the same
//   address with the same size is served correctly by the cached buffer: it names the same bytes.
//   A call that fails drops its buffers (Gloo may still hold a pending operation on them).
// - the ring's scratch (one chunk on more than two ranks; none on two, where the ring receives
//   into the output) is a tensor per (dtype, bytes) lent the same way, so its unbound buffer is
//   cached with it.
// Both caches are bounded (kCachedBuffers, kCachedScratch; the least recently returned goes first),
// so a run whose sizes change holds at most kCachedScratch scratch tensors of at most 1/n of its
// largest reduce_scatter input. The cost this removes is allocation and set-up, not a
// registration: Gloo's TCP transport registers nothing with the kernel for an unbound buffer.
class BufferCache {
 public:
  static constexpr std::size_t kCachedBuffers = 32;
  static constexpr std::size_t kCachedScratch = 4;

  // An unbound buffer over [ptr, ptr + bytes) on `context`; give it back with give_back() after
  // a call that succeeded, or let it go after one that failed.
  std::unique_ptr<::gloo::transport::UnboundBuffer> take(::gloo::Context& context, void* ptr,
                                                         std::size_t bytes);
  void give_back(::gloo::Context& context, std::unique_ptr<::gloo::transport::UnboundBuffer> buffer);
  // A 1-d scratch tensor of `numel` elements like `like`.
  at::Tensor take_scratch(const at::Tensor& like, std::int64_t numel);
  void give_back_scratch(at::Tensor scratch);

  // How many unbound buffers this cache created (not served from the cache), for tests.
  std::uint64_t created() const;

 private:
  struct Entry {
    const ::gloo::Context* context;
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
  };
  mutable std::mutex mutex_;
  std::vector<Entry> buffers_;       // most recently returned last
  std::vector<at::Tensor> scratch_;  // most recently returned last
  std::uint64_t created_ = 0;
};

class GlooGroup final : public ::c10d::ProcessGroupGloo {
 public:
  using ::c10d::ProcessGroupGloo::ProcessGroupGloo;
  // The base of the works run() queues. See Note [c10d across LibTorch versions].
  using NativeWork = compat::GlooWork<::c10d::ProcessGroupGloo::AsyncWork>;

  // Runs body(context, tag) inline (async_op false: returns an empty handle) or on c10d's worker
  // threads (returns the queued Work of type `op`; `output` is what its result holds). The native
  // collectives always queue (see the Note).
  compat::WorkHandle run(bool async_op, ::c10d::OpType op, const at::Tensor& output,
                         std::chrono::milliseconds timeout,
                         std::function<void(const std::shared_ptr<::gloo::Context>&, std::uint32_t)> body);

  // See Note [Cached Gloo buffers]. Shared with the queued works: c10d's destructor, which runs
  // after this class's members are gone, still finishes them.
  const std::shared_ptr<BufferCache>& buffers() const { return buffers_; }

 private:
  // c10d's sequence number for the next collective where its works carry one (2.x): c10d's own
  // collectives count in seq_ and so do ours, so that its records number each collective once.
  // A template, so that seq_ is named only where it exists.
  template <bool kCounted>
  std::uint64_t take_seq() {
    if constexpr (kCounted) {
      auto* self = static_cast<std::conditional_t<kCounted, GlooGroup, void>*>(this);
      return ++self->seq_;
    } else {
      return 0;
    }
  }

  std::shared_ptr<BufferCache> buffers_ = std::make_shared<BufferCache>();
};

// What dtrain's gloo backend reduces (allreduce, reduce_scatter), on every LibTorch: c10d's Gloo
// reduces bool and complex too from some 2.x on, dtrain's ring and LibTorch 1.13's Gloo do not.
// bfloat16 is reduced through dtrain's exchange (Note [bfloat16 on Gloo]).
const std::vector<at::ScalarType>& gloo_reduced_dtypes();

// Whether c10d's ProcessGroupGloo reduces float16 itself. LibTorch 1.13 does (through Gloo's own
// float16); 2.x does only when built against a Gloo that uses torch's types (GLOO_USE_TORCH_DTYPES,
// set in the bundled Gloo of the official builds, not in Debian's system Gloo, whose
// ProcessGroupGloo throws "Invalid scalar type"). The Gloo headers dtrain is given are taken to be
// those of the Gloo inside LibTorch; where they do not say so, float16 is all-reduced by the
// exchange bfloat16 uses (Note [bfloat16 on Gloo]), the same sum rounded once.
bool gloo_reduces_float16();

// The NativeCollective functions of C10dCapabilities for a GlooGroup; see the Note.
compat::WorkHandle gloo_reduce_scatter(compat::CollectiveGroup& group, const at::Tensor& input,
                                       const at::Tensor& output, ReduceOp op, bool async_op,
                                       std::chrono::milliseconds timeout);
compat::WorkHandle gloo_allgather(compat::CollectiveGroup& group, const at::Tensor& input,
                                  const at::Tensor& output, ReduceOp op, bool async_op,
                                  std::chrono::milliseconds timeout);

}  // namespace dtrain::comm
