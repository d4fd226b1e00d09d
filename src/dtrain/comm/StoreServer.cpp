#include "dtrain/comm/StoreServer.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace dtrain::comm {

struct StoreServer::Impl {
  c10::intrusive_ptr<::c10d::TCPStore> store;
};

StoreServer::StoreServer(const std::string& host, int port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  ::c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = timeout;
  impl_->store = c10::make_intrusive<::c10d::TCPStore>(host, options);
}

StoreServer::~StoreServer() = default;

int StoreServer::port() const {
  return impl_->store->getPort();
}

}  // namespace dtrain::comm
