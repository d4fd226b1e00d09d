// StoreConnection: connect with retries, the client's half of the handshake, and one request at a
// time. get() and wait() poll (Get/Check with a growing pause) rather than park on the server, so
// a timed-out wait leaves no late reply on the connection to be mistaken for the next one.
#include "dtrain/comm/store/StoreConnection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace dtrain::comm {

using wire::Clock;

namespace {

// One connect() to each address of host:port; -1 when none accepts.
int connect_once(const std::string& host, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc));
    return -1;
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  return -1;
}

std::vector<uint8_t> to_bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

}  // namespace

StoreConnection::StoreConnection(const std::string& host, int port, std::chrono::milliseconds timeout,
                                 const std::string& secret, std::shared_ptr<void> keep_alive)
    : CloneableStore(timeout),
      host_(host),
      port_(port),
      secret_(secret),
      address_(fmt::format("{}:{}", host, port)),
      keep_alive_(std::move(keep_alive)) {
  const auto deadline = Clock::now() + timeout;
  std::string error = "nothing listens there";
  auto pause = std::chrono::milliseconds(10);
  while ((fd_ = connect_once(host, port, error)) < 0) {
    if (Clock::now() >= deadline) {
      throw std::runtime_error(
          fmt::format("store at {}: nothing answers within {} ms ({})", address_, timeout.count(), error));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  // The handshake, Note [Store handshake].
  auto fail = [&](const std::string& why) {
    ::close(fd_);
    fd_ = -1;
    throw StoreRefused(fmt::format("the store at {} {}", address_, why));
  };
  char greeting[sizeof(wire::kGreeting)];
  std::uint8_t wants_secret = 0;
  if (!wire::recv_all(fd_, greeting, sizeof(greeting), deadline) ||
      std::memcmp(greeting, wire::kGreeting, sizeof(greeting)) != 0 ||
      !wire::read_u8(fd_, wants_secret, deadline)) {
    fail("did not greet as a dtrain store (is another program listening on that port?)");
  }
  if (wants_secret == 0) {
    if (!secret.empty()) {
      fail(
          "asks for no secret, but this process has one: it is not the job's store, or the job was "
          "started without --secret-file");
    }
    return;
  }
  if (secret.empty()) {
    fail(
        "asks for a shared secret, which this process lacks: give the job's secret file with --secret-file "
        "or DTRAIN_SECRET_FILE");
  }
  wire::Digest challenge{};
  if (!wire::recv_all(fd_, challenge.data(), challenge.size(), deadline)) fail("closed during the handshake");
  const wire::Digest mine = wire::random_digest();
  const wire::Digest proof = wire::prove(secret, wire::kClientLabel, challenge);
  wire::Message answer;
  answer.raw(proof.data(), proof.size()).raw(mine.data(), mine.size());
  std::uint8_t accepted = 0;
  if (!answer.send(fd_, deadline) || !wire::read_u8(fd_, accepted, deadline) || accepted != 1) {
    fail("refused this process's secret: the secret files differ");
  }
  wire::Digest server_proof{};
  if (!wire::recv_all(fd_, server_proof.data(), server_proof.size(), deadline) ||
      !wire::same(server_proof, wire::prove(secret, wire::kServerLabel, mine))) {
    fail("did not prove it knows the secret: it is not the job's store");
  }
}

StoreConnection::~StoreConnection() {
  if (fd_ >= 0) ::close(fd_);
}

c10::intrusive_ptr<::c10d::Store> StoreConnection::clone_connection() {
  return c10::make_intrusive<StoreConnection>(host_, port_, timeout_, secret_, keep_alive_);
}

template <typename Read>
auto StoreConnection::request(const std::string& what, const wire::Message& message, Read&& read) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + std::max(timeout_, std::chrono::milliseconds(1000));
  if (fd_ < 0 || !message.send(fd_, deadline)) {
    throw std::runtime_error(fmt::format("store at {}: {}: the connection is lost", address_, what));
  }
  auto result = read(deadline);
  if (!result) {
    // A half-read reply leaves the connection out of step: it is not used again.
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(fmt::format("store at {}: {}: no reply (the store is gone?)", address_, what));
  }
  return *result;
}

void StoreConnection::set(const std::string& key, const std::vector<uint8_t>& value) {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::Set)).field(key).field(value);
  request("set " + key, m, [&](Clock::time_point d) -> std::optional<bool> {
    std::uint8_t ok = 0;
    if (!wire::read_u8(fd_, ok, d)) return std::nullopt;
    return true;
  });
}

std::vector<uint8_t> StoreConnection::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                                 const std::vector<uint8_t>& desired) {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::CompareSet)).field(key).field(expected).field(desired);
  return request("compare-set " + key, m, [&](Clock::time_point d) -> std::optional<std::vector<uint8_t>> {
    std::string value;
    if (!wire::read_field(fd_, value, d)) return std::nullopt;
    return to_bytes(value);
  });
}

std::optional<std::string> StoreConnection::try_get(const std::string& key) {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::Get)).field(key);
  return request("get " + key, m, [&](Clock::time_point d) -> std::optional<std::optional<std::string>> {
    std::uint8_t found = 0;
    if (!wire::read_u8(fd_, found, d)) return std::nullopt;
    if (found == 0) return std::optional<std::string>();
    std::string value;
    if (!wire::read_field(fd_, value, d)) return std::nullopt;
    return std::optional<std::string>(std::move(value));
  });
}

std::vector<uint8_t> StoreConnection::get(const std::string& key) {
  const auto deadline = Clock::now() + timeout_;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    if (auto value = try_get(key)) return to_bytes(*value);
    if (Clock::now() >= deadline) {
      throw std::runtime_error(
          fmt::format("store at {}: get {}: not set within {} ms", address_, key, timeout_.count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
}

int64_t StoreConnection::add(const std::string& key, int64_t value) {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::Add)).field(key).i64(value);
  return request("add " + key, m, [&](Clock::time_point d) -> std::optional<int64_t> {
    std::int64_t result = 0;
    if (!wire::read_i64(fd_, result, d)) return std::nullopt;
    return result;
  });
}

bool StoreConnection::deleteKey(const std::string& key) {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::Delete)).field(key);
  return request("delete " + key, m, [&](Clock::time_point d) -> std::optional<bool> {
    std::uint8_t deleted = 0;
    if (!wire::read_u8(fd_, deleted, d)) return std::nullopt;
    return deleted == 1;
  });
}

bool StoreConnection::check(const std::vector<std::string>& keys) {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::Check)).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) m.field(key);
  return request("check", m, [&](Clock::time_point d) -> std::optional<bool> {
    std::uint8_t all = 0;
    if (!wire::read_u8(fd_, all, d)) return std::nullopt;
    return all == 1;
  });
}

int64_t StoreConnection::getNumKeys() {
  wire::Message m;
  m.u8(static_cast<std::uint8_t>(wire::Request::NumKeys));
  return request("count keys", m, [&](Clock::time_point d) -> std::optional<int64_t> {
    std::int64_t n = 0;
    if (!wire::read_i64(fd_, n, d)) return std::nullopt;
    return n;
  });
}

void StoreConnection::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void StoreConnection::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (const auto& key : keys) {
        if (!check({key})) missing.push_back(key);
      }
      throw std::runtime_error(fmt::format("store at {}: wait: {} not set within {} ms", address_,
                                           fmt::join(missing, ", "), timeout.count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace dtrain::comm
