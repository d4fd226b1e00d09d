// StoreServer over c10d's TCPStore as a server; a port that cannot be bound is reported without
// c10d's C++ backtrace.
#include "dtrain/comm/StoreServer.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <stdexcept>

#include "dtrain/comm/ErrorText.h"

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
  try {
    impl_->store = c10::make_intrusive<::c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot host a store at {}:{}: {}", host, port, error_text(e)));
  }
}

StoreServer::~StoreServer() = default;

int StoreServer::port() const {
  return impl_->store->getPort();
}

}  // namespace dtrain::comm
