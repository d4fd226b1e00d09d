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
  // Gloo: worker threads of the process group (c10d's default is 2) and network interface
  // ("" = resolve the host name, falling back to loopback).
  int gloo_threads = 1;
  std::string gloo_interface;
};

// Backends compiled into this build, e.g. {"gloo", "mpi"}.
std::vector<std::string> available_backends();

// Connects this process to the others. Throws std::invalid_argument for an unknown backend
// (listing the available ones) and CommError when the peers do not show up within the timeout.
std::unique_ptr<Communicator> connect(const BackendOptions& backend, const RendezvousInfo& rendezvous);

}  // namespace dtrain::comm
