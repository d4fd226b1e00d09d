// StoreClient over StoreConnection, with string keys and values.
#include "dtrain/comm/store/StoreClient.h"

#include <fmt/format.h>

#include <stdexcept>

#include "dtrain/comm/store/StoreConnection.h"

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
  c10::intrusive_ptr<StoreConnection> store;
};

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout,
                         const std::string& secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->store = c10::make_intrusive<StoreConnection>(host, port, timeout, secret);
}

StoreClient::~StoreClient() = default;

void StoreClient::set(const std::string& key, const std::string& value) {
  impl_->store->set(key, bytes(value));
}

std::string StoreClient::set_if_absent(const std::string& key, const std::string& value) {
  // compareSet with an empty expected value sets a key that does not exist yet.
  return text(impl_->store->compareSet(key, {}, bytes(value)));
}

std::string StoreClient::get(const std::string& key) {
  return text(impl_->store->get(key));
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  return impl_->store->add(key, delta);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return impl_->store->check(keys);
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  impl_->store->wait(keys, timeout);
}

}  // namespace dtrain::comm
