#include "dtrain/comm/Backend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/cuda.h>

#include <algorithm>
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

BackendChoice choose_backend(const BackendLayout& layout) {
  const auto built = available_backends();
  auto has = [&](const char* name) { return std::find(built.begin(), built.end(), name) != built.end(); };
  const int n = layout.world_size;
  if (layout.cuda && has("nccl") && layout.local_world_size <= layout.gpus) {
    return {"nccl", fmt::format("CUDA tensors, NCCL ({} rank(s) on a host of {} GPU(s))",
                                layout.local_world_size, layout.gpus)};
  }
  if (n <= 1) return {"gloo", "1 rank, nothing to communicate"};
  if (layout.local_world_size < n) {
    if (layout.mpi_processes && has("mpi")) {
      return {"mpi",
              fmt::format("{} ranks over several hosts ({} on this one), started by mpirun: shared memory "
                          "within a host, TCP between hosts",
                          n, layout.local_world_size)};
    }
    return {"gloo", fmt::format("{} ranks over several hosts ({} on this one), TCP between hosts", n,
                                layout.local_world_size)};
  }
  if (!has("mpi"))
    return {"gloo", fmt::format("{} ranks on one host, but this build has no MPI; TCP over loopback", n)};
  if (!layout.mpi_processes) {
    return {"gloo",
            fmt::format("{} ranks on one host, but not started by mpirun (dtrain train --nproc starts it "
                        "when mpirun is in PATH); TCP over loopback",
                        n)};
  }
  return {"mpi", fmt::format("{} ranks on one host, shared memory", n)};
}

std::string describe(const BackendChoice& choice) {
  return fmt::format("backend auto \u2192 {}: {}", choice.name, choice.reason);
}

std::string resolve_backend(const std::string& configured, const RendezvousInfo& rendezvous, bool cuda,
                            std::string* line) {
  if (configured != "auto") return configured;
  BackendLayout layout;
  layout.world_size = rendezvous.world_size;
  layout.local_world_size = rendezvous.local_world_size;
  layout.mpi_processes = rendezvous.source == "openmpi";
  layout.cuda = cuda;
  layout.gpus = cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  const auto choice = choose_backend(layout);
  if (line) *line = describe(choice);
  return choice.name;
}

namespace {

std::unique_ptr<Communicator> connect_backend(const BackendOptions& backend,
                                              const RendezvousInfo& rendezvous) {
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

}  // namespace

std::unique_ptr<Communicator> connect(const BackendOptions& backend, const RendezvousInfo& rendezvous) {
  if (backend.name == "auto") {
    throw std::invalid_argument("backend 'auto' must be resolved with choose_backend() before connecting");
  }
  auto communicator = connect_backend(backend, rendezvous);
  communicator->set_debug(backend.debug);
  return communicator;
}

}  // namespace dtrain::comm
