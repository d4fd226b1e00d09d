// StoreChannel: one authenticated connection to a StoreServer and its requests, one at a time,
// with plain strings for keys and values. StoreClient and StoreConnection (the c10d::Store
// adapter) are both built on it; it needs nothing of LibTorch. Internal to comm/.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/comm/store/StoreWire.h"

namespace dtrain::comm {

// The store answered but the handshake failed: a secret is missing, wrong, or not asked for. Says
// what to fix; waiting longer would not help.
class StoreRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class StoreChannel {
 public:
  // Connects to host:port (every address it resolves to), retrying until `timeout` while nothing
  // listens, then proves `secret` (empty: none), Note [Store handshake]. Throws std::runtime_error
  // naming host:port when no store answers, StoreRefused when the store asks for a secret this side
  // lacks, rejects this side's, or asks for none while this side has one. `timeout` also bounds
  // get() and wait().
  StoreChannel(const std::string& host, int port, std::chrono::milliseconds timeout,
               const std::string& secret);
  ~StoreChannel();
  StoreChannel(const StoreChannel&) = delete;
  StoreChannel& operator=(const StoreChannel&) = delete;

  void set(const std::string& key, const std::string& value);
  // c10d::Store::compareSet's rule; returns the value the key holds afterwards.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  std::optional<std::string> try_get(const std::string& key);
  // Waits up to the timeout (or `timeout`) for the key to be set.
  std::string get(const std::string& key) { return get(key, timeout_); }
  std::string get(const std::string& key, std::chrono::milliseconds timeout);
  // Every key's value or nothing, in one request.
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys);
  std::int64_t add(const std::string& key, std::int64_t delta);
  bool remove(const std::string& key);
  bool check(const std::vector<std::string>& keys);
  std::int64_t num_keys();
  // Parks on the server until every key (or, with `any`, one of them) is set; false once `timeout`
  // passes first. The server answers when a key is written, so nobody polls (Note [Store waits] in
  // comm/store/StoreWire.h).
  bool wait_until(const std::vector<std::string>& keys, std::chrono::milliseconds timeout, bool any = false);
  // wait_until all, throwing std::runtime_error that names the keys still missing after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& address() const { return address_; }

 private:
  // Sends one request and reads its reply under the lock, the reply due within `reply_within`
  // (at least a second); throws naming the store and `what`.
  template <typename Read>
  auto request(const std::string& what, const wire::Message& message, Read&& read,
               std::chrono::milliseconds reply_within);
  template <typename Read>
  auto request(const std::string& what, const wire::Message& message, Read&& read) {
    return request(what, message, std::forward<Read>(read), timeout_);
  }

  std::string address_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  std::mutex mutex_;
};

}  // namespace dtrain::comm
