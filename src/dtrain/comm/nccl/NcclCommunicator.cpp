// connect_nccl(): the store rendezvous, then c10d's ProcessGroupNCCL on this rank's GPU
// (cuda:local_rank). Compiled only in CUDA builds of LibTorch (DTRAIN_WITH_NCCL).
#include "dtrain/comm/nccl/NcclCommunicator.h"

// Torch's CMake config does not export USE_C10D_NCCL, yet ProcessGroupNCCL.hpp declares nothing
// without it; this file is only compiled where Torch has CUDA and NCCL (see comm/CMakeLists.txt).
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <fmt/format.h>

#include <stdexcept>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/c10d/C10dCommunicator.h"
#include "dtrain/comm/c10d/StoreRendezvous.h"

namespace dtrain::comm {

// NCCL chooses ring, tree or CollNet per call from its own tuning model and the topology, and
// dtrain cannot see the choice, so these are estimates: what a ring sends (each row's WireForm in
// kCollectives; nccl-tests' bus bandwidth factors). An all-reduce by a tree sends 2x the buffer on
// inner nodes and less on leaves; the figures are exact only where NCCL runs the ring.
std::uint64_t nccl_wire_estimate(const WireCall& call, int rank, int size) {
  if (call.op == CommOp::Barrier) {  // c10d's NCCL barrier all-reduces one float
    const auto n = static_cast<std::uint64_t>(size);
    return 2 * (n - 1) * sizeof(float) / n;
  }
  return plain_wire_bytes(call, rank, size);
}

std::unique_ptr<Communicator> connect_nccl(const BackendOptions& options, const RendezvousInfo& rendezvous) {
  const int rank = rendezvous.rank;
  const int size = rendezvous.world_size;
  const int devices = static_cast<int>(c10::cuda::device_count());
  if (devices == 0) {
    throw std::invalid_argument(
        "backend nccl needs a CUDA GPU and this process sees none; use backend gloo on CPU");
  }
  if (rendezvous.local_rank >= devices) {
    throw std::invalid_argument(
        fmt::format("local rank {} has no GPU of its own: this node has {} GPU(s); start at most "
                    "{} processes per node (--nproc-per-node)",
                    rendezvous.local_rank, devices, devices));
  }
  // c10d's NCCL places its communicators on the current device; one GPU per local rank.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(rendezvous.local_rank));

  C10dCapabilities capabilities;
  capabilities.poll_wait = options.poll_wait;
  capabilities.flat_collectives = true;  // _allgather_base and _reduce_scatter_base are native
  capabilities.p2p_completes_without_wait = true;
  capabilities.groups_p2p = true;  // Note [Grouped point-to-point] in c10d/C10dCommunicator.cpp
  capabilities.wire_bytes = nccl_wire_estimate;
  // Host tensors (metric sums, batch sizes, headers) are carried through this GPU.
  capabilities.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rendezvous.local_rank));
  GroupFactory factory = [timeout = options.timeout](const compat::StorePtr& group_store, int group_rank,
                                                     int group_size) {
    auto nccl_options = ::c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout;
    return compat::GroupPtr(
        c10::make_intrusive<::c10d::ProcessGroupNCCL>(group_store, group_rank, group_size, nccl_options));
  };
  if (size == 1) {
    return std::make_unique<C10dCommunicator>("nccl", 0, 1, options.timeout, compat::StorePtr(),
                                              compat::GroupPtr(), std::move(factory), capabilities);
  }
  compat::StorePtr store = join_store(rendezvous, "nccl");
  compat::GroupPtr group;
  try {
    group = factory(store, rank, size);
  } catch (const c10::Error& e) {
    throw CommError(rank, size, "rendezvous (nccl)",
                    fmt::format("creating the NCCL process group failed: {}", e.what_without_backtrace()));
  }
  return std::make_unique<C10dCommunicator>("nccl", rank, size, options.timeout, std::move(store),
                                            std::move(group), std::move(factory), capabilities);
}

}  // namespace dtrain::comm
