// StoreClient: a connection to the rendezvous key-value store that a StoreServer hosts (in this
// or another process), for code outside comm/ that needs the store itself: the
// launchers of a multi-node job tell each other of a failed worker through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::comm {

class StoreClient {
 public:
  // Connects to host:port, retrying until `timeout`, and proves `secret` when the store asks for
  // one (Note [Store handshake]); throws std::runtime_error naming the address when no store
  // answers by then or the secrets do not match. `timeout` also bounds get().
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout = std::chrono::minutes(5),
              const std::string& secret = {});
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::string& value);
  // Sets `key` to `value` unless it holds a value already; returns what it holds afterwards, so
  // the first of several writers wins and every writer learns which value that was.
  std::string set_if_absent(const std::string& key, const std::string& value);
  // The value of `key`, waiting for it to be set.
  std::string get(const std::string& key);
  // The values of `keys` (nothing for a key not set), in one request, without waiting.
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys);
  // Adds `delta` to the counter `key` (0 when absent) and returns the sum, atomically: of several
  // callers each gets a different value. add(key, 0) reads it.
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Whether every key is set, without waiting.
  bool check(const std::vector<std::string>& keys);
  // Until every key is set; throws std::runtime_error naming the keys still missing after `timeout`.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Until one of `keys` is set (any) or all of them; false after `timeout`. The server wakes the
  // waiter when the key is written (Note [Store waits] in comm/store/StoreWire.h): no polling.
  bool wait_until(const std::vector<std::string>& keys, std::chrono::milliseconds timeout, bool any);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::comm
