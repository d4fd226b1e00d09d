// The mpi backend: OpenMPI, with a progress thread so collectives overlap computation.
#pragma once

#include <memory>

#include "dtrain/comm/Backend.h"

namespace dtrain::comm {

// Initialises MPI (once per process) and wraps MPI_COMM_WORLD. The rank and size come from MPI
// itself; a rendezvous that disagrees with them is an error.
std::unique_ptr<Communicator> connect_mpi(const BackendOptions& options, const RendezvousInfo& rendezvous);

}  // namespace dtrain::comm
