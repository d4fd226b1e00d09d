// StoreClient over c10d's TCPStore as a client. c10d's errors carry a C++ backtrace that says
// nothing to a user; they are rethrown as std::runtime_error naming the store and the operation.
#include "dtrain/comm/StoreClient.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "dtrain/comm/ErrorText.h"
#include "dtrain/util/Clock.h"

namespace dtrain::comm {
namespace {

std::vector<std::uint8_t> bytes(const std::string& text) {
  return {text.begin(), text.end()};
}

std::string text(const std::vector<std::uint8_t>& bytes) {
  return {bytes.begin(), bytes.end()};
}

}  // namespace

struct StoreClient::Impl {
  std::string address;
  c10::intrusive_ptr<::c10d::TCPStore> store;

  // Runs one store operation, naming the store and the operation if it fails.
  template <typename F>
  auto run(const std::string& what, F&& operation) -> decltype(operation()) {
    try {
      return operation();
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("store at {}: {}: {}", address, what, error_text(e)));
    }
  }
};

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = fmt::format("{}:{}", host, port);
  ::c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  impl_->store = impl_->run(fmt::format("cannot connect within {} ms", timeout.count()),
                            [&] { return c10::make_intrusive<::c10d::TCPStore>(host, options); });
}

StoreClient::~StoreClient() = default;

void StoreClient::set(const std::string& key, const std::string& value) {
  impl_->run("set " + key, [&] { impl_->store->set(key, bytes(value)); });
}

std::string StoreClient::set_if_absent(const std::string& key, const std::string& value) {
  // compareSet with an empty expected value sets a key that does not exist yet.
  return impl_->run("set " + key, [&] { return text(impl_->store->compareSet(key, {}, bytes(value))); });
}

std::string StoreClient::get(const std::string& key) {
  return impl_->run("get " + key, [&] { return text(impl_->store->get(key)); });
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return impl_->run("check", [&] { return impl_->store->check(keys); });
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  // Polling check() rather than TCPStore's timed wait(): a client whose wait() timed out may read
  // the late answer to it as the reply to its next request (see comm/c10d/StoreRendezvous.cpp).
  const auto deadline = util::Clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  while (!check(keys)) {
    if (util::Clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (const auto& key : keys) {
        if (!check({key})) missing.push_back(key);
      }
      throw std::runtime_error(fmt::format("store at {}: wait: {} not set within {} ms", impl_->address,
                                           fmt::join(missing, ", "), timeout.count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace dtrain::comm
