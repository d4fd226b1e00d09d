// StoreConnection: c10d::Store's calls forwarded to a StoreChannel, with c10d's byte vectors for
// values.
#include "dtrain/comm/store/StoreConnection.h"

namespace dtrain::comm {
namespace {

std::vector<uint8_t> to_bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

std::string to_text(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

}  // namespace

StoreConnection::StoreConnection(const std::string& host, int port, std::chrono::milliseconds timeout,
                                 const std::string& secret, std::shared_ptr<void> keep_alive)
    : CloneableStore(timeout),
      host_(host),
      port_(port),
      secret_(secret),
      channel_(std::make_unique<StoreChannel>(host, port, timeout, secret)),
      keep_alive_(std::move(keep_alive)) {}

StoreConnection::~StoreConnection() = default;

c10::intrusive_ptr<::c10d::Store> StoreConnection::clone_connection() {
  return c10::make_intrusive<StoreConnection>(host_, port_, timeout_, secret_, keep_alive_);
}

void StoreConnection::set(const std::string& key, const std::vector<uint8_t>& value) {
  channel_->set(key, to_text(value));
}

std::vector<uint8_t> StoreConnection::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  return to_bytes(channel_->compare_set(key, to_text(expected), to_text(desired)));
}

std::vector<uint8_t> StoreConnection::get(const std::string& key) {
  return to_bytes(channel_->get(key, timeout_));
}

int64_t StoreConnection::add(const std::string& key, int64_t value) {
  return channel_->add(key, value);
}

bool StoreConnection::deleteKey(const std::string& key) {
  return channel_->remove(key);
}

bool StoreConnection::check(const std::vector<std::string>& keys) {
  return channel_->check(keys);
}

int64_t StoreConnection::getNumKeys() {
  return channel_->num_keys();
}

void StoreConnection::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void StoreConnection::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  channel_->wait(keys, timeout);
}

}  // namespace dtrain::comm
