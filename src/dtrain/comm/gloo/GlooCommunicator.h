// The gloo backend: c10d's ProcessGroupGloo over a c10d TCPStore.
#pragma once

#include <memory>

#include "dtrain/comm/Backend.h"

namespace dtrain::comm {

// Creates (rank 0, unless an agent hosts it) or joins the TCPStore at the rendezvous address,
// then builds the process group. Fails with CommError naming the missing ranks on timeout.
std::unique_ptr<Communicator> connect_gloo(const BackendOptions& options, const RendezvousInfo& rendezvous);

}  // namespace dtrain::comm
