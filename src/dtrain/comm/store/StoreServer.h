// StoreServer: hosts the rendezvous key-value store in this process, as torchrun's agent and
// `dtrain launch` do, so that workers connect with agent_store = true. Tests use it to run ranks
// as threads. StoreClient (comm/store/StoreClient.h) connects to it.
//
// Our own server rather than c10d's TCPStore, whose server in LibTorch 1.13 always listens on
// every interface (its options have no address) and lets anyone who connects read and write every
// key: this one listens only on the address it is given (127.0.0.1 for a one-host job) and, given
// a secret, refuses a connection that does not prove it knows it before reading any request
// (Note [Store handshake] in comm/store/StoreWire.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::comm {

// What the server holds, for benchmarks and logs. connection_bytes counts the server's own memory
// for its open connections (their state, buffers and waits), not the kernel's socket buffers.
struct StoreServerStats {
  std::size_t connections = 0;
  std::size_t connection_bytes = 0;
  std::size_t keys = 0;
  std::size_t value_bytes = 0;
};

// Makes sure this process may hold `descriptors` open files (RLIMIT_NOFILE), raising its soft
// limit toward the hard one when it is lower. Throws std::runtime_error naming both limits, the
// number needed for `what`, and how to raise the hard limit, when even that is too low.
void reserve_descriptors(std::size_t descriptors, const std::string& what);

class StoreServer {
 public:
  // Listens on every address `host` resolves to (one for an IP address) and on nothing else; port
  // 0 binds a free port, port() tells which. An empty `secret` lets anyone who reaches the port in.
  // `timeout` bounds a connecting peer's handshake, a request's bytes once it has begun, and a
  // reply the peer does not read. `expected_members` (0: not known) is the number of connections
  // to expect: the file-descriptor limit is checked for them at the start (reserve_descriptors).
  // Throws std::runtime_error naming host:port when it cannot listen there (the port is taken, or
  // the address is not one of this host's) or the descriptor limit is too low.
  explicit StoreServer(const std::string& host = "127.0.0.1", int port = 0,
                       std::chrono::milliseconds timeout = std::chrono::minutes(5), std::string secret = {},
                       int expected_members = 0);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;

  // One line per refused connection, naming the peer and why ("wrong secret", ...); each is also
  // written to stderr as it happens.
  std::vector<std::string> refusals() const;

  // Asked of the server's loop, so it waits for the loop's turn.
  StoreServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::comm
