// The backend factory: the one place that turns a backend name into a Communicator.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/comm/Rendezvous.h"

namespace dtrain::comm {

struct BackendOptions {
  std::string name = "gloo";  // gloo | mpi | nccl
  // Per-operation timeout: a peer that does not answer within it fails the operation.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Gloo: worker threads of the process group (c10d's default, 2, measured 5-20x faster than 1 at
  // 4 KB on a loaded 2-core host; see bench/RESULTS.md) and network interface ("" = loopback for a
  // loopback master address, else this host's name).
  int gloo_threads = 2;
  std::string gloo_interface;
  // How long Work::wait() polls for completion, yielding the core between polls, before it blocks
  // on a condition variable (every backend). Polling saves a thread wake-up per
  // operation, which costs up to a scheduler tick when every core is busy; 0 blocks at once.
  std::chrono::microseconds poll_wait{std::chrono::milliseconds(50)};
};

// Backends compiled into this build, e.g. {"gloo", "mpi"}.
std::vector<std::string> available_backends();

// Connects this process to the others. Throws std::invalid_argument for an unknown backend
// (listing the available ones) and CommError when the peers do not show up within the timeout.
std::unique_ptr<Communicator> connect(const BackendOptions& backend, const RendezvousInfo& rendezvous);

}  // namespace dtrain::comm
