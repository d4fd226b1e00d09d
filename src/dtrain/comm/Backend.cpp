#include "dtrain/comm/Backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "dtrain/comm/gloo/GlooCommunicator.h"
#ifdef DTRAIN_WITH_MPI
#include "dtrain/comm/mpi/MpiCommunicator.h"
#endif
#ifdef DTRAIN_WITH_NCCL
#include "dtrain/comm/nccl/NcclCommunicator.h"
#endif

namespace dtrain::comm {

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"gloo"};
#ifdef DTRAIN_WITH_MPI
  names.push_back("mpi");
#endif
#ifdef DTRAIN_WITH_NCCL
  names.push_back("nccl");
#endif
  return names;
}

std::unique_ptr<Communicator> connect(const BackendOptions& backend, const RendezvousInfo& rendezvous) {
  if (backend.name == "gloo") return connect_gloo(backend, rendezvous);
#ifdef DTRAIN_WITH_MPI
  if (backend.name == "mpi") return connect_mpi(backend, rendezvous);
#endif
#ifdef DTRAIN_WITH_NCCL
  if (backend.name == "nccl") return connect_nccl(backend, rendezvous);
#endif
  throw std::invalid_argument(fmt::format("unknown communication backend '{}'; this build has: {}",
                                          backend.name, fmt::join(available_backends(), ", ")));
}

}  // namespace dtrain::comm
