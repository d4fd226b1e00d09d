// The nccl backend (CUDA builds of LibTorch only): c10d's ProcessGroupNCCL over a c10d TCPStore.
#pragma once

#include <memory>

#include "dtrain/comm/Backend.h"

namespace dtrain::comm {

std::unique_ptr<Communicator> connect_nccl(const BackendOptions& options, const RendezvousInfo& rendezvous);

}  // namespace dtrain::comm
