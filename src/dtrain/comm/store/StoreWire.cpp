// Socket helpers with deadlines (poll before every read and write, so that no peer can hold a
// thread past its deadline) and the handshake's HMAC-SHA256 through OpenSSL.
#include "dtrain/comm/store/StoreWire.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace dtrain::comm::wire {
namespace {

bool ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

bool send_all(int fd, const void* data, std::size_t n, Clock::time_point deadline) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    if (!ready(fd, POLLOUT, deadline)) return false;
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<std::size_t>(sent);
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (n > 0) {
    if (!ready(fd, POLLIN, deadline)) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

Message& Message::raw(const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  data_.insert(data_.end(), p, p + n);
  return *this;
}

Message& Message::u8(std::uint8_t v) {
  return raw(&v, 1);
}

Message& Message::u32(std::uint32_t v) {
  const std::uint32_t be = htonl(v);
  return raw(&be, sizeof(be));
}

Message& Message::i64(std::int64_t v) {
  std::uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (56 - 8 * i));
  return raw(b, 8);
}

Message& Message::bytes(const void* data, std::size_t n) {
  if (n > kMaxField)
    throw std::invalid_argument(fmt::format("a store key or value of {} bytes is too long", n));
  u32(static_cast<std::uint32_t>(n));
  return raw(data, n);
}

bool read_u8(int fd, std::uint8_t& v, Clock::time_point deadline) {
  return recv_all(fd, &v, 1, deadline);
}

bool read_u32(int fd, std::uint32_t& v, Clock::time_point deadline) {
  std::uint32_t be = 0;
  if (!recv_all(fd, &be, sizeof(be), deadline)) return false;
  v = ntohl(be);
  return true;
}

bool read_i64(int fd, std::int64_t& v, Clock::time_point deadline) {
  std::uint8_t b[8];
  if (!recv_all(fd, b, 8, deadline)) return false;
  std::uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | b[i];
  v = static_cast<std::int64_t>(u);
  return true;
}

bool read_field(int fd, std::string& v, Clock::time_point deadline) {
  std::uint32_t n = 0;
  if (!read_u32(fd, n, deadline) || n > kMaxField) return false;
  v.resize(n);
  return n == 0 || recv_all(fd, v.data(), n, deadline);
}

Digest random_digest() {
  Digest d{};
  if (RAND_bytes(d.data(), static_cast<int>(d.size())) != 1) {
    throw std::runtime_error("the store handshake could not draw random bytes (OpenSSL RAND_bytes failed)");
  }
  return d;
}

Digest prove(const std::string& secret, const char* label, const Digest& challenge) {
  std::string message(label);
  message.append(reinterpret_cast<const char*>(challenge.data()), challenge.size());
  Digest out{};
  unsigned int length = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
            reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &length) ||
      length != out.size()) {
    throw std::runtime_error("the store handshake could not compute HMAC-SHA256 (OpenSSL failed)");
  }
  return out;
}

bool same(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string peer_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "an unknown peer";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return fmt::format("{}:{}", host, port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in6*>(&address);
  ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
  port = ntohs(a->sin6_port);
  return fmt::format("[{}]:{}", host, port);
}

}  // namespace dtrain::comm::wire
