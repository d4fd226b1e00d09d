// StoreChannel: connect with retries, the client's half of the handshake, and one request at a
// time. get() and wait() park on the server with a Wait request (Note [Store waits]); the server
// answers a Wait by its own deadline, so a wait that times out leaves no late reply on the
// connection to be mistaken for the next one.
#include "dtrain/comm/store/StoreChannel.h"

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
#include <memory>
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

std::uint8_t code(wire::Request request) {
  return static_cast<std::uint8_t>(request);
}

}  // namespace

StoreChannel::StoreChannel(const std::string& host, int port, std::chrono::milliseconds timeout,
                           const std::string& secret)
    : address_(fmt::format("{}:{}", host, port)), timeout_(timeout) {
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

StoreChannel::~StoreChannel() {
  if (fd_ >= 0) ::close(fd_);
}

template <typename Read>
auto StoreChannel::request(const std::string& what, const wire::Message& message, Read&& read,
                           std::chrono::milliseconds reply_within) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + std::max(reply_within, std::chrono::milliseconds(1000));
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

void StoreChannel::set(const std::string& key, const std::string& value) {
  wire::Message m;
  m.u8(code(wire::Request::Set)).field(key).field(value);
  request("set " + key, m, [&](Clock::time_point d) -> std::optional<bool> {
    std::uint8_t ok = 0;
    if (!wire::read_u8(fd_, ok, d)) return std::nullopt;
    return true;
  });
}

std::string StoreChannel::compare_set(const std::string& key, const std::string& expected,
                                      const std::string& desired) {
  wire::Message m;
  m.u8(code(wire::Request::CompareSet)).field(key).field(expected).field(desired);
  return request("compare-set " + key, m, [&](Clock::time_point d) -> std::optional<std::string> {
    std::string value;
    if (!wire::read_field(fd_, value, d)) return std::nullopt;
    return value;
  });
}

std::optional<std::string> StoreChannel::try_get(const std::string& key) {
  wire::Message m;
  m.u8(code(wire::Request::Get)).field(key);
  return request("get " + key, m, [&](Clock::time_point d) -> std::optional<std::optional<std::string>> {
    std::uint8_t found = 0;
    if (!wire::read_u8(fd_, found, d)) return std::nullopt;
    if (found == 0) return std::optional<std::string>();
    std::string value;
    if (!wire::read_field(fd_, value, d)) return std::nullopt;
    return std::optional<std::string>(std::move(value));
  });
}

std::string StoreChannel::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (auto value = try_get(key)) return *value;
  if (wait_until({key}, timeout)) {
    if (auto value = try_get(key)) return *value;
  }
  throw std::runtime_error(
      fmt::format("store at {}: get {}: not set within {} ms", address_, key, timeout.count()));
}

std::vector<std::optional<std::string>> StoreChannel::multi_get(const std::vector<std::string>& keys) {
  wire::Message m;
  m.u8(code(wire::Request::MultiGet)).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) m.field(key);
  using Values = std::vector<std::optional<std::string>>;
  return request("multi-get", m, [&](Clock::time_point d) -> std::optional<Values> {
    Values values(keys.size());
    for (auto& value : values) {
      std::uint8_t found = 0;
      if (!wire::read_u8(fd_, found, d)) return std::nullopt;
      if (found == 0) continue;
      value.emplace();
      if (!wire::read_field(fd_, *value, d)) return std::nullopt;
    }
    return values;
  });
}

std::int64_t StoreChannel::add(const std::string& key, std::int64_t delta) {
  wire::Message m;
  m.u8(code(wire::Request::Add)).field(key).i64(delta);
  return request("add " + key, m, [&](Clock::time_point d) -> std::optional<std::int64_t> {
    std::int64_t result = 0;
    if (!wire::read_i64(fd_, result, d)) return std::nullopt;
    return result;
  });
}

bool StoreChannel::remove(const std::string& key) {
  wire::Message m;
  m.u8(code(wire::Request::Delete)).field(key);
  return request("delete " + key, m, [&](Clock::time_point d) -> std::optional<bool> {
    std::uint8_t deleted = 0;
    if (!wire::read_u8(fd_, deleted, d)) return std::nullopt;
    return deleted == 1;
  });
}

bool StoreChannel::check(const std::vector<std::string>& keys) {
  wire::Message m;
  m.u8(code(wire::Request::Check)).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) m.field(key);
  return request("check", m, [&](Clock::time_point d) -> std::optional<bool> {
    std::uint8_t all = 0;
    if (!wire::read_u8(fd_, all, d)) return std::nullopt;
    return all == 1;
  });
}

std::int64_t StoreChannel::num_keys() {
  wire::Message m;
  m.u8(code(wire::Request::NumKeys));
  return request("count keys", m, [&](Clock::time_point d) -> std::optional<std::int64_t> {
    std::int64_t n = 0;
    if (!wire::read_i64(fd_, n, d)) return std::nullopt;
    return n;
  });
}

bool StoreChannel::wait_until(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                              bool any) {
  wire::Message m;
  m.u8(code(wire::Request::Wait)).u8(any ? 1 : 0).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) m.field(key);
  m.i64(std::max<std::int64_t>(timeout.count(), 0));
  // The server answers by its own deadline; this side allows the store's timeout on top for the
  // reply to arrive.
  return request(
      "wait", m,
      [&](Clock::time_point d) -> std::optional<bool> {
        std::uint8_t set = 0;
        if (!wire::read_u8(fd_, set, d)) return std::nullopt;
        return set == 1;
      },
      timeout + timeout_);
}

void StoreChannel::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (wait_until(keys, timeout)) return;
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (!check({key})) missing.push_back(key);
  }
  if (missing.empty()) return;  // set just after the server's deadline
  throw std::runtime_error(fmt::format("store at {}: wait: {} not set within {} ms", address_,
                                       fmt::join(missing, ", "), timeout.count()));
}

}  // namespace dtrain::comm
