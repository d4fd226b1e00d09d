// The nccl backend (CUDA builds of LibTorch only): c10d's ProcessGroupNCCL over a c10d TCPStore.
#pragma once

#include <cstdint>
#include <memory>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/WireBytes.h"

namespace dtrain::comm {

// The bytes rank `rank` of `size` sends for `call`, as a ring would send them (NCCL picks ring, tree or
// CollNet itself and does not say which): what the nccl backend records. See NcclCommunicator.cpp.
std::uint64_t nccl_wire_estimate(const WireCall& call, int rank, int size);

std::unique_ptr<Communicator> connect_nccl(const BackendOptions& options, const RendezvousInfo& rendezvous);

}  // namespace dtrain::comm
