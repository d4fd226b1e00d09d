// StoreServer: hosts the rendezvous key-value store (c10d's TCPStore) in this process, as
// torchrun's agent and `dtrain launch` do, so that workers connect with agent_store = true.
// Tests use it to run ranks as threads; c10d stays hidden behind this header. StoreClient
// (comm/StoreClient.h) connects to it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace dtrain::comm {

class StoreServer {
 public:
  // port 0 binds a free port; port() tells which. Throws std::runtime_error when the port is taken.
  explicit StoreServer(const std::string& host = "127.0.0.1", int port = 0,
                       std::chrono::milliseconds timeout = std::chrono::minutes(5));
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::comm
