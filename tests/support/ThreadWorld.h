// The one way tests run ranks as threads of the test process: run_threads() for plain threads,
// run_world() for a world of communicators over gloo (really communicating through a store the
// test hosts, as torchrun's agent does) or over the in-process test double, which logs every call
// and fails on mismatched collectives.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/store/StoreServer.h"
#include "support/InProcessCommunicator.h"

namespace dtrain::testing {

// Runs fn(rank) on n threads and rethrows the first failure (lowest rank) on the calling thread.
// Where more than one rank failed, the others' messages go to stderr first: a rank that fails with
// "connection closed by peer" usually follows a peer's own failure, which is the one to read.
// Each thread uses one intra-op thread, so ranks do not fight over the cores.
inline void run_threads(int n, const std::function<void(int rank)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        torch::set_num_threads(1);
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::exception_ptr first;
  for (int r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    if (!first) {
      first = errors[r];
      continue;
    }
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      std::cerr << "run_threads: rank " << r << " failed too: " << e.what() << "\n";
    } catch (...) {
      std::cerr << "run_threads: rank " << r << " failed too (not a std::exception)\n";
    }
  }
  if (first) std::rethrow_exception(first);
}

struct WorldOptions {
  // "gloo" (real sockets), "nccl" (CUDA builds; rank r on GPU r) or "in-process" (the logging
  // test double).
  std::string backend = "gloo";
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Further backend settings; name and timeout are taken from above.
  comm::BackendOptions gloo;

  static WorldOptions on(std::string backend) {
    WorldOptions options;
    options.backend = std::move(backend);
    return options;
  }
};

inline comm::RendezvousInfo thread_rank_info(int rank, int size, int port,
                                             std::chrono::milliseconds timeout) {
  comm::RendezvousInfo info;
  info.rank = rank;
  info.world_size = size;
  info.local_rank = rank;
  info.local_world_size = size;
  info.master_addr = "127.0.0.1";
  info.master_port = port;
  info.agent_store = true;
  info.timeout = timeout;
  return info;
}

// The in-process test double's communicators for a world of n, rank r at index r.
inline std::vector<comm::CommunicatorPtr> in_process_group(int n) {
  auto hub = std::make_shared<Hub>(n);
  std::vector<comm::CommunicatorPtr> comms;
  for (int r = 0; r < n; ++r) comms.push_back(std::make_shared<InProcessCommunicator>(hub, r));
  return comms;
}

// Runs fn(communicator) on n threads, one rank each; rethrows the first failure.
inline void run_world(int n, const std::function<void(comm::CommunicatorPtr)>& fn,
                      const WorldOptions& options = {}) {
  if (options.backend == "in-process") {
    auto comms = in_process_group(n);
    run_threads(n, [&](int r) { fn(comms[r]); });
    return;
  }
  TORCH_CHECK(options.backend == "gloo" || options.backend == "nccl", "run_world: backend '", options.backend,
              "' cannot run as threads; use gloo, nccl (a GPU per rank) or in-process");
  comm::StoreServer server("127.0.0.1", 0, options.timeout);
  run_threads(n, [&](int r) {
    comm::BackendOptions backend = options.gloo;
    backend.name = options.backend;
    backend.timeout = options.timeout;
    std::shared_ptr<comm::Communicator> communicator =
        comm::connect(backend, thread_rank_info(r, n, server.port(), options.timeout));
    fn(communicator);
  });
}

}  // namespace dtrain::testing
