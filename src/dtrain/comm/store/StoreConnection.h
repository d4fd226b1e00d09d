// StoreConnection: a connection to a StoreServer as a c10d::Store, so that c10d's process groups
// (ProcessGroupGloo's rendezvous sets, gets and waits through it) and PrefixStore use it like
// c10d's own TCPStore client. It passes the handshake of Note [Store handshake] before anything
// else. It adapts a StoreChannel, which holds the socket and the protocol. Internal to comm/:
// StoreClient is the interface for other layers.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/store/StoreChannel.h"

namespace dtrain::comm {

class StoreConnection : public compat::CloneableStore<StoreConnection> {
 public:
  // Connects to host:port (every address it resolves to), retrying until `timeout` while nothing
  // listens, then proves `secret` (empty: none). Throws std::runtime_error naming host:port when no
  // store answers, StoreRefused when the store asks for a secret this side lacks, rejects this
  // side's, or asks for none while this side has one. `keep_alive` is held as long as this connection (the
  // StoreServer that rank 0 hosts for its own world).
  StoreConnection(const std::string& host, int port, std::chrono::milliseconds timeout,
                  const std::string& secret, std::shared_ptr<void> keep_alive = nullptr);
  ~StoreConnection() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  // Waits up to the store's timeout for the key to be set.
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  const std::string& address() const { return channel_->address(); }

  // A new connection to the same store, with the same secret (c10d's Store::clone() where this
  // LibTorch has it: c10d clones a store for threads of its own, such as NCCL's monitor).
  c10::intrusive_ptr<::c10d::Store> clone_connection();

 private:
  std::string host_;
  int port_;
  std::string secret_;
  std::unique_ptr<StoreChannel> channel_;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace dtrain::comm
