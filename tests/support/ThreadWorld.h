// Runs N ranks as threads of the test process over the gloo backend, meeting through a store the
// test hosts (as torchrun's agent does). For multi-rank tests of the layers above comm.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/StoreServer.h"

namespace dtrain::testing {

inline void run_world(int size, const std::function<void(std::shared_ptr<comm::Communicator>)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  comm::StoreServer server("127.0.0.1", 0, timeout);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        // Ranks share the process: one intra-op thread each keeps them from fighting over cores.
        torch::set_num_threads(1);
        comm::RendezvousInfo info;
        info.rank = r;
        info.world_size = size;
        info.local_rank = r;
        info.local_world_size = size;
        info.master_addr = "127.0.0.1";
        info.master_port = server.port();
        info.agent_store = true;
        info.timeout = timeout;
        comm::BackendOptions options;
        options.name = "gloo";
        options.timeout = timeout;
        std::shared_ptr<comm::Communicator> communicator = comm::connect(options, info);
        fn(communicator);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace dtrain::testing
