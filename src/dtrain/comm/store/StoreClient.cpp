// StoreClient over StoreChannel; it needs nothing of LibTorch.
#include "dtrain/comm/store/StoreClient.h"

#include "dtrain/comm/store/StoreChannel.h"

namespace dtrain::comm {

struct StoreClient::Impl {
  explicit Impl(const std::string& host, int port, std::chrono::milliseconds timeout,
                const std::string& secret)
      : channel(host, port, timeout, secret) {}
  StoreChannel channel;
};

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout,
                         const std::string& secret)
    : impl_(std::make_unique<Impl>(host, port, timeout, secret)) {}

StoreClient::~StoreClient() = default;

void StoreClient::set(const std::string& key, const std::string& value) {
  impl_->channel.set(key, value);
}

std::string StoreClient::set_if_absent(const std::string& key, const std::string& value) {
  // compareSet with an empty expected value sets a key that does not exist yet.
  return impl_->channel.compare_set(key, {}, value);
}

std::string StoreClient::get(const std::string& key) {
  return impl_->channel.get(key);
}

std::vector<std::optional<std::string>> StoreClient::multi_get(const std::vector<std::string>& keys) {
  return impl_->channel.multi_get(keys);
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  return impl_->channel.add(key, delta);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return impl_->channel.check(keys);
}

void StoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  impl_->channel.wait(keys, timeout);
}

bool StoreClient::wait_until(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                             bool any) {
  return impl_->channel.wait_until(keys, timeout, any);
}

}  // namespace dtrain::comm
