// StoreServer's setup and public calls: the listening sockets, the descriptor limit, the loop's
// thread and the questions other threads ask of it (refusals, stats). The loop is in
// StoreServerLoop.cpp, the requests in StoreServerRequests.cpp.
#include "dtrain/comm/store/StoreServer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <stdexcept>

#include "dtrain/comm/store/StoreServerImpl.h"

namespace dtrain::comm {

void reserve_descriptors(std::size_t descriptors, const std::string& what) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) throw std::runtime_error(std::strerror(errno));
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= descriptors) return;
  if (limit.rlim_cur == RLIM_INFINITY) return;
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < descriptors) {
    throw std::runtime_error(fmt::format(
        "{} needs about {} file descriptors, but this process may open at most {} (RLIMIT_NOFILE: soft "
        "{}, hard {}); raise the hard limit for the job's user (nofile in /etc/security/limits.conf, "
        "LimitNOFILE= in a systemd unit, or `ulimit -Hn {}` as root in the shell that starts it)",
        what, descriptors, limit.rlim_max, limit.rlim_cur, limit.rlim_max, descriptors));
  }
  const rlim_t old = limit.rlim_cur;
  limit.rlim_cur = descriptors;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    throw std::runtime_error(fmt::format(
        "{} needs about {} file descriptors; this process may open {} and could not raise it ({}); "
        "raise it with `ulimit -n {}` in the shell that starts the job",
        what, descriptors, old, std::strerror(errno), descriptors));
  }
}

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
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
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
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
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

StoreServerStats StoreServer::Impl::stats() {
  StoreServerStats s;
  s.connections = connections.size();
  s.keys = data.size();
  s.value_bytes = value_bytes;
  for (const auto& [id, c] : connections) {
    // The connection, its entry in the table, its buffers and its waits.
    s.connection_bytes += sizeof(Connection) + sizeof(id) + 2 * sizeof(void*) + c->peer.capacity() +
                          c->in.capacity() + c->out_bytes + c->out.size() * sizeof(c->out.front()) +
                          c->watched.size() * 48;
    for (const auto& k : c->wait_keys) s.connection_bytes += sizeof(k) + k.capacity();
  }
  return s;
}

StoreServer::StoreServer(const std::string& host, int port, std::chrono::milliseconds timeout,
                         std::string secret, int expected_members)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->secret = std::move(secret);
  impl_->timeout = timeout;
  try {
    if (port < 0 || port > 65535) throw std::runtime_error("not a TCP port");
    if (expected_members > 0) {
      // One descriptor a member, and a few for the listeners, the loop, stdio and libraries.
      reserve_descriptors(static_cast<std::size_t>(expected_members) + 64,
                          fmt::format("a store for {} members", expected_members));
    }
    impl_->listen_on(host, port);
    impl_->epoll = ::epoll_create1(EPOLL_CLOEXEC);
    impl_->wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    impl_->reserve = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (impl_->epoll < 0 || impl_->wake < 0) throw std::runtime_error(std::strerror(errno));
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u64 = Impl::kWakeTag;
    ::epoll_ctl(impl_->epoll, EPOLL_CTL_ADD, impl_->wake, &event);
    for (std::size_t i = 0; i < impl_->listeners.size(); ++i) {
      event.data.u64 = Impl::kListenerTag | i;
      ::epoll_ctl(impl_->epoll, EPOLL_CTL_ADD, impl_->listeners[i], &event);
    }
  } catch (const std::exception& e) {
    for (int fd : impl_->listeners) ::close(fd);
    for (int fd : {impl_->epoll, impl_->wake, impl_->reserve}) {
      if (fd >= 0) ::close(fd);
    }
    throw std::runtime_error(fmt::format("cannot host a store at {}:{}: {}", host, port, e.what()));
  }
  impl_->loop = std::thread([impl = impl_.get()] { impl->run(); });
}

StoreServer::~StoreServer() {
  impl_->stopping = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(impl_->wake, &one, sizeof(one));
  impl_->loop.join();
  while (!impl_->connections.empty()) impl_->close(*impl_->connections.begin()->second);
  for (int fd : impl_->listeners) ::close(fd);
  for (int fd : {impl_->epoll, impl_->wake, impl_->reserve}) {
    if (fd >= 0) ::close(fd);
  }
}

int StoreServer::port() const {
  return impl_->port;
}

std::vector<std::string> StoreServer::refusals() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->refused;
}

StoreServerStats StoreServer::stats() const {
  auto promise = std::make_shared<std::promise<StoreServerStats>>();
  auto result = promise->get_future();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->tasks.push_back([impl = impl_.get(), promise] { promise->set_value(impl->stats()); });
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(impl_->wake, &one, sizeof(one));
  return result.get();
}

}  // namespace dtrain::comm
