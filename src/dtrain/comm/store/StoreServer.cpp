// StoreServer: one thread accepts, one thread per connection serves it. Requests are answered at
// once (a key that is not set yet is answered "not found"): waiting is the client's, which polls,
// so no thread blocks on a key and a client that gives up leaves nothing behind here.
#include "dtrain/comm/store/StoreServer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "dtrain/comm/store/StoreWire.h"

namespace dtrain::comm {

using wire::Clock;

struct StoreServer::Impl {
  std::string host;
  std::string secret;
  std::chrono::milliseconds timeout;
  std::vector<int> listeners;
  int port = 0;
  int wake[2] = {-1, -1};  // a pipe that ends the accept loop
  std::thread acceptor;

  std::mutex mutex;  // guards data, connections and refused
  std::map<std::string, std::string> data;
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  std::list<std::unique_ptr<Connection>> connections;
  std::vector<std::string> refused;
  std::atomic<bool> stopping{false};

  void listen_on(const std::string& address, int wanted_port);
  void accept_loop();
  void serve(Connection& connection);
  bool handshake(int fd, const std::string& peer);
  bool answer(int fd, wire::Request request);
  // The requests with more than a line of work; each reads its fields and fills `reply`, false
  // when the connection or the request is bad.
  bool answer_add(int fd, Clock::time_point deadline, wire::Message& reply);
  bool answer_check(int fd, Clock::time_point deadline, wire::Message& reply);
  bool answer_compare_set(int fd, Clock::time_point deadline, wire::Message& reply);
  void refuse(const std::string& peer, const std::string& why);
};

void StoreServer::Impl::listen_on(const std::string& address, int wanted_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(wanted_port);
  if (const int rc = ::getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw std::runtime_error(fmt::format("cannot resolve '{}': {}", address, ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  std::string skipped;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      skipped = std::strerror(errno);  // e.g. IPv6 switched off: "localhost" still has 127.0.0.1
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // An IPv6 address means that address only, not IPv4 as well.
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    // Every address of a name shares the port the first one got.
    if (port != 0) {
      if (a->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(port);
      if (a->ai_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(port);
    }
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
      const int error = errno;
      ::close(fd);
      // An address of the name that is not this host's is left out; a taken port is an error.
      if (error == EADDRNOTAVAIL || error == EAFNOSUPPORT) {
        skipped = std::strerror(error);
        continue;
      }
      throw std::runtime_error(std::strerror(error));
    }
    listeners.push_back(fd);
    if (port == 0) {
      sockaddr_storage bound{};
      socklen_t length = sizeof(bound);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
      port = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                              : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    }
  }
  if (listeners.empty()) {
    throw std::runtime_error(fmt::format("{}; is '{}' an address of this host?", skipped, address));
  }
}

void StoreServer::Impl::refuse(const std::string& peer, const std::string& why) {
  const std::string line =
      fmt::format("dtrain store at {}:{}: refused the connection from {}: {}", host, port, peer, why);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::lock_guard<std::mutex> lock(mutex);
  refused.push_back(line);
}

void StoreServer::Impl::accept_loop() {
  std::vector<pollfd> fds;
  for (int fd : listeners) fds.push_back({fd, POLLIN, 0});
  fds.push_back({wake[0], POLLIN, 0});
  while (!stopping) {
    for (auto& p : fds) p.revents = 0;
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds.back().revents != 0) return;
    for (std::size_t i = 0; i + 1 < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int fd = ::accept4(fds[i].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      std::lock_guard<std::mutex> lock(mutex);
      // Reap the threads of connections that have ended.
      for (auto it = connections.begin(); it != connections.end();) {
        if ((*it)->done) {
          (*it)->thread.join();
          ::close((*it)->fd);
          it = connections.erase(it);
        } else {
          ++it;
        }
      }
      auto connection = std::make_unique<Connection>();
      connection->fd = fd;
      Connection* raw = connection.get();
      connection->thread = std::thread([this, raw] { serve(*raw); });
      connections.push_back(std::move(connection));
    }
  }
}

bool StoreServer::Impl::handshake(int fd, const std::string& peer) {
  const auto deadline = Clock::now() + std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(30));
  wire::Message greeting;
  greeting.raw(wire::kGreeting, sizeof(wire::kGreeting)).u8(secret.empty() ? 0 : 1);
  if (secret.empty()) return greeting.send(fd, deadline);
  const wire::Digest challenge = wire::random_digest();
  greeting.raw(challenge.data(), challenge.size());
  if (!greeting.send(fd, deadline)) return false;
  wire::Digest proof{};
  wire::Digest client_challenge{};
  if (!wire::recv_all(fd, proof.data(), proof.size(), deadline) ||
      !wire::recv_all(fd, client_challenge.data(), client_challenge.size(), deadline)) {
    refuse(peer, "it did not answer the secret challenge (a client without the job's secret?)");
    return false;
  }
  if (!wire::same(proof, wire::prove(secret, wire::kClientLabel, challenge))) {
    wire::Message no;
    no.u8(0);
    no.send(fd, deadline);
    refuse(peer, "wrong secret");
    return false;
  }
  const wire::Digest answer = wire::prove(secret, wire::kServerLabel, client_challenge);
  wire::Message yes;
  yes.u8(1).raw(answer.data(), answer.size());
  return yes.send(fd, deadline);
}

bool StoreServer::Impl::answer_add(int fd, Clock::time_point deadline, wire::Message& reply) {
  std::string key;
  std::int64_t delta = 0;
  if (!wire::read_field(fd, key, deadline) || !wire::read_i64(fd, delta, deadline)) return false;
  std::lock_guard<std::mutex> lock(mutex);
  std::int64_t value = delta;
  const auto it = data.find(key);
  if (it != data.end()) {
    try {
      value += std::stoll(it->second);
    } catch (const std::exception&) {
      return false;  // a key set to something that is not a number cannot be added to
    }
  }
  data[key] = std::to_string(value);
  reply.i64(value);
  return true;
}

bool StoreServer::Impl::answer_check(int fd, Clock::time_point deadline, wire::Message& reply) {
  std::uint32_t count = 0;
  if (!wire::read_u32(fd, count, deadline) || count > 1u << 20) return false;
  std::vector<std::string> keys(count);
  for (auto& k : keys) {
    if (!wire::read_field(fd, k, deadline)) return false;
  }
  std::lock_guard<std::mutex> lock(mutex);
  bool all = true;
  for (const auto& k : keys) all = all && data.count(k) > 0;
  reply.u8(all ? 1 : 0);
  return true;
}

// c10d's rule: an absent key is set when `expected` is empty; a present one when it holds
// `expected`; the reply is the value the key holds afterwards (or `expected` if absent).
bool StoreServer::Impl::answer_compare_set(int fd, Clock::time_point deadline, wire::Message& reply) {
  std::string key;
  std::string expected;
  std::string desired;
  if (!wire::read_field(fd, key, deadline) || !wire::read_field(fd, expected, deadline) ||
      !wire::read_field(fd, desired, deadline)) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = data.find(key);
  if (it == data.end()) {
    if (expected.empty()) data[key] = desired;
    reply.field(expected.empty() ? desired : expected);
  } else {
    if (it->second == expected) it->second = desired;
    reply.field(it->second);
  }
  return true;
}

bool StoreServer::Impl::answer(int fd, wire::Request request) {
  // A request's fields follow its code at once; its reply is due at once.
  const auto deadline = Clock::now() + timeout;
  wire::Message reply;
  std::string key;
  switch (request) {
    case wire::Request::Set: {
      std::string value;
      if (!wire::read_field(fd, key, deadline) || !wire::read_field(fd, value, deadline)) return false;
      {
        std::lock_guard<std::mutex> lock(mutex);
        data[key] = std::move(value);
      }
      reply.u8(1);
      break;
    }
    case wire::Request::Get: {
      if (!wire::read_field(fd, key, deadline)) return false;
      std::lock_guard<std::mutex> lock(mutex);
      const auto it = data.find(key);
      reply.u8(it != data.end() ? 1 : 0);
      if (it != data.end()) reply.field(it->second);
      break;
    }
    case wire::Request::Add:
      if (!answer_add(fd, deadline, reply)) return false;
      break;
    case wire::Request::Check:
      if (!answer_check(fd, deadline, reply)) return false;
      break;
    case wire::Request::CompareSet:
      if (!answer_compare_set(fd, deadline, reply)) return false;
      break;
    case wire::Request::Delete: {
      if (!wire::read_field(fd, key, deadline)) return false;
      std::lock_guard<std::mutex> lock(mutex);
      reply.u8(data.erase(key) > 0 ? 1 : 0);
      break;
    }
    case wire::Request::NumKeys: {
      std::lock_guard<std::mutex> lock(mutex);
      reply.i64(static_cast<std::int64_t>(data.size()));
      break;
    }
    default:
      return false;
  }
  return reply.send(fd, deadline);
}

void StoreServer::Impl::serve(Connection& connection) {
  const int fd = connection.fd;
  const std::string peer = wire::peer_address(fd);
  if (handshake(fd, peer)) {
    std::uint8_t code = 0;
    // Between requests a client may stay quiet as long as it likes: no deadline but the end of
    // the server (which shuts the socket down).
    while (!stopping && wire::read_u8(fd, code, Clock::time_point::max())) {
      if (code < 1 || code > 7) {
        refuse(peer, fmt::format("unknown request code {}; not a dtrain store client", code));
        break;
      }
      if (!answer(fd, static_cast<wire::Request>(code))) break;
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  connection.done = true;
}

StoreServer::StoreServer(const std::string& host, int port, std::chrono::milliseconds timeout,
                         std::string secret)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->secret = std::move(secret);
  impl_->timeout = timeout;
  try {
    if (port < 0 || port > 65535) throw std::runtime_error("not a TCP port");
    impl_->listen_on(host, port);
    if (::pipe2(impl_->wake, O_CLOEXEC) != 0) throw std::runtime_error(std::strerror(errno));
  } catch (const std::exception& e) {
    for (int fd : impl_->listeners) ::close(fd);
    throw std::runtime_error(fmt::format("cannot host a store at {}:{}: {}", host, port, e.what()));
  }
  impl_->acceptor = std::thread([impl = impl_.get()] { impl->accept_loop(); });
}

StoreServer::~StoreServer() {
  impl_->stopping = true;
  const char byte = 1;
  [[maybe_unused]] const auto written = ::write(impl_->wake[1], &byte, 1);
  impl_->acceptor.join();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (auto& c : impl_->connections) ::shutdown(c->fd, SHUT_RDWR);
  }
  for (auto& c : impl_->connections) {
    c->thread.join();
    ::close(c->fd);
  }
  for (int fd : impl_->listeners) ::close(fd);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

int StoreServer::port() const {
  return impl_->port;
}

std::vector<std::string> StoreServer::refusals() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->refused;
}

}  // namespace dtrain::comm
