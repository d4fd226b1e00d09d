// StoreServer: one thread runs an epoll loop over the listening sockets and every connection, so
// that ten thousand members cost ten thousand sockets and a few hundred bytes each, not ten
// thousand threads. Every socket is non-blocking: a connection's bytes are gathered until a whole
// request (or handshake answer) is there, then answered; a peer that stalls holds nothing but its
// buffer, and its deadline (the handshake's, a begun request's, an unread reply's) closes it. A
// Wait parks the connection on the key it lacks until a write wakes it (Note [Store waits] in
// comm/store/StoreWire.h).
#include "dtrain/comm/store/StoreServer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "dtrain/comm/store/StoreWire.h"

namespace dtrain::comm {

using wire::Clock;

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

namespace {

// A reply's bytes, shared with the store when they are a value (a round's member list is sent to
// every member without a copy each).
using Bytes = std::shared_ptr<const std::string>;

Bytes bytes_of(const wire::Message& m) {
  const auto& data = m.data();
  return std::make_shared<const std::string>(reinterpret_cast<const char*>(data.data()), data.size());
}

// Reads a request's fields from the bytes gathered so far: Short until they are all there, Bad when
// they cannot be a request (a length beyond the limits).
class Reader {
 public:
  enum State { Ok, Short, Bad };
  Reader(const std::string& in, std::size_t pos) : in_(in), pos_(pos) {}

  bool u8(std::uint8_t& v) {
    if (!have(1)) return false;
    v = static_cast<std::uint8_t>(in_[pos_++]);
    return true;
  }
  bool u32(std::uint32_t& v) {
    if (!have(4)) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<std::uint8_t>(in_[pos_++]);
    return true;
  }
  bool i64(std::int64_t& v) {
    if (!have(8)) return false;
    std::uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<std::uint8_t>(in_[pos_++]);
    v = static_cast<std::int64_t>(u);
    return true;
  }
  bool field(std::string& v) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    if (n > wire::kMaxField) return fail();
    if (!have(n)) return false;
    v.assign(in_, pos_, n);
    pos_ += n;
    return true;
  }
  // A count of keys: at most 2^20, as before this server.
  bool count(std::uint32_t& n) { return u32(n) && (n <= (1u << 20) || fail()); }
  bool fail() {
    state_ = Bad;
    return false;
  }
  State state() const { return state_; }
  std::size_t pos() const { return pos_; }

 private:
  bool have(std::size_t n) {
    if (state_ != Ok) return false;
    if (in_.size() - pos_ >= n) return true;
    state_ = Short;
    return false;
  }
  const std::string& in_;
  std::size_t pos_;
  State state_ = Ok;
};

constexpr auto kNever = Clock::time_point::max();
constexpr std::uint64_t kListenerTag = 1ull << 63;
constexpr std::uint64_t kWakeTag = kListenerTag - 1;

}  // namespace

struct StoreServer::Impl {
  std::string host;
  std::string secret;
  std::chrono::milliseconds timeout;
  std::vector<int> listeners;
  int port = 0;
  int epoll = -1;
  int wake = -1;     // an eventfd: stop, or run what `tasks` holds
  int reserve = -1;  // a descriptor kept free, to turn a connection away when the limit is reached
  std::thread loop;
  std::atomic<bool> stopping{false};

  mutable std::mutex mutex;  // guards refused and tasks: what other threads share with the loop
  std::vector<std::string> refused;
  std::vector<std::function<void()>> tasks;

  // Everything below belongs to the loop's thread.
  struct Connection {
    std::uint64_t id = 0;
    int fd = -1;
    std::string peer;
    bool proven = false;  // passed the handshake (or none was asked)
    wire::Digest challenge{};
    std::string in;                                 // bytes read and not yet answered
    std::deque<std::pair<Bytes, std::size_t>> out;  // replies not yet sent, and how far each is
    std::size_t out_bytes = 0;
    bool writing = false;  // EPOLLOUT armed
    bool closing = false;  // close once `out` is sent
    bool waiting = false;  // parked on a Wait
    bool wait_any = false;
    std::vector<std::string> wait_keys;
    std::vector<std::string> watched;  // keys in `watchers` with this connection
    Clock::time_point handshake_deadline = kNever, request_deadline = kNever, send_deadline = kNever,
                      wait_deadline = kNever, armed = kNever;
  };
  std::unordered_map<std::string, Bytes> data;
  std::size_t value_bytes = 0;
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections;
  std::unordered_map<std::string, std::unordered_set<std::uint64_t>> watchers;
  std::set<std::pair<Clock::time_point, std::uint64_t>> timers;
  std::vector<std::uint64_t> resume;  // woken waiters with requests behind their Wait

  void listen_on(const std::string& address, int wanted_port);
  void run();
  void accept_from(int listener);
  void on_event(Connection& c, std::uint32_t events);
  void process(Connection& c);
  bool handshake(Connection& c);
  Reader::State answer(Connection& c, Reader& in);
  void answer_wait(Connection& c, Reader& in, std::vector<std::string>& keys);
  void send(Connection& c, Bytes bytes);
  bool flush(Connection& c);
  void close(Connection& c);
  void arm(Connection& c);
  void expire(Clock::time_point now);
  void put(const std::string& key, std::string value);
  void notify(const std::string& key);
  bool satisfied(const Connection& c) const;
  void watch(Connection& c);
  void unwatch(Connection& c);
  void finish_wait(Connection& c, bool set);
  void refuse(const std::string& peer, const std::string& why);
  StoreServerStats stats();
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

void StoreServer::Impl::run() {
  std::vector<epoll_event> events(256);
  while (!stopping) {
    int wait_ms = -1;
    if (!timers.empty()) {
      const auto left = timers.begin()->first - Clock::now();
      wait_ms = static_cast<int>(std::clamp<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1, 0, 1 << 30));
    }
    const int n = ::epoll_wait(epoll, events.data(), static_cast<int>(events.size()), wait_ms);
    if (n < 0 && errno != EINTR) return;
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto got = ::read(wake, &count, sizeof(count));
        std::vector<std::function<void()>> run_now;
        {
          std::lock_guard<std::mutex> lock(mutex);
          run_now.swap(tasks);
        }
        for (auto& task : run_now) task();
        if (stopping) return;
      } else if (tag & kListenerTag) {
        accept_from(listeners[tag & ~kListenerTag]);
      } else if (const auto it = connections.find(tag); it != connections.end()) {
        on_event(*it->second, events[i].events);
      }
    }
    // Waiters woken with more requests behind their Wait (a client of this protocol sends none).
    while (!resume.empty()) {
      std::vector<std::uint64_t> woken;
      woken.swap(resume);
      for (const auto id : woken) {
        if (const auto it = connections.find(id); it != connections.end()) process(*it->second);
      }
    }
    expire(Clock::now());
  }
}

void StoreServer::Impl::accept_from(int listener) {
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if ((errno == EMFILE || errno == ENFILE) && reserve >= 0) {
        // Out of descriptors: take the one kept free to accept and close the connection, so that
        // the listener does not stay readable and spin the loop.
        ::close(reserve);
        const int turned_away = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (turned_away >= 0) {
          refuse(wire::peer_address(turned_away),
                 "this process has no file descriptor left (RLIMIT_NOFILE; see `ulimit -n`)");
          ::close(turned_away);
        }
        reserve = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        continue;
      }
      return;  // EAGAIN: no more waiting; anything else: the peer left before we took it
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto owned = std::make_unique<Connection>();
    Connection& c = *owned;
    c.id = next_id++;
    c.fd = fd;
    c.peer = wire::peer_address(fd);
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.u64 = c.id;
    if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) != 0) {
      ::close(fd);
      continue;
    }
    connections.emplace(c.id, std::move(owned));
    // The greeting, Note [Store handshake].
    wire::Message greeting;
    greeting.raw(wire::kGreeting, sizeof(wire::kGreeting)).u8(secret.empty() ? 0 : 1);
    if (secret.empty()) {
      c.proven = true;
    } else {
      c.challenge = wire::random_digest();
      greeting.raw(c.challenge.data(), c.challenge.size());
      c.handshake_deadline =
          Clock::now() + std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(30));
    }
    send(c, bytes_of(greeting));
    if (flush(c)) arm(c);
  }
}

void StoreServer::Impl::on_event(Connection& c, std::uint32_t events) {
  if ((events & EPOLLOUT) && !flush(c)) return;
  bool ended = (events & EPOLLERR) != 0;
  if (events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) {
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t got = ::recv(c.fd, buffer, sizeof(buffer), 0);
      if (got > 0) {
        c.in.append(buffer, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ended = true;
      break;
    }
  }
  // Requests that came before the end are answered, as a blocking server would.
  const std::uint64_t id = c.id;
  process(c);
  const auto it = connections.find(id);
  if (it == connections.end()) return;
  if (ended) {
    if (!c.proven)
      refuse(c.peer, "it did not answer the secret challenge (a client without the job's secret?)");
    close(c);
    return;
  }
  // A peer that keeps writing while its requests cannot be read is not a client.
  if (c.in.size() > 2 * static_cast<std::size_t>(wire::kMaxField) + 1024) {
    close(c);
    return;
  }
  arm(c);
}

bool StoreServer::Impl::handshake(Connection& c) {
  constexpr std::size_t kAnswer = 2 * wire::kDigestBytes;  // the proof, then the client's challenge
  if (c.in.size() < kAnswer) return false;
  wire::Digest proof{};
  wire::Digest client_challenge{};
  std::memcpy(proof.data(), c.in.data(), proof.size());
  std::memcpy(client_challenge.data(), c.in.data() + proof.size(), client_challenge.size());
  c.in.erase(0, kAnswer);
  c.handshake_deadline = kNever;
  if (!wire::same(proof, wire::prove(secret, wire::kClientLabel, c.challenge))) {
    wire::Message no;
    no.u8(0);
    send(c, bytes_of(no));
    refuse(c.peer, "wrong secret");
    c.closing = true;
    return true;
  }
  const wire::Digest answer = wire::prove(secret, wire::kServerLabel, client_challenge);
  wire::Message yes;
  yes.u8(1).raw(answer.data(), answer.size());
  send(c, bytes_of(yes));
  c.proven = true;
  return true;
}

void StoreServer::Impl::process(Connection& c) {
  const std::uint64_t id = c.id;
  std::size_t pos = 0;
  if (!c.proven && !c.closing && !handshake(c)) return;
  while (c.proven && !c.closing && !c.waiting && pos < c.in.size()) {
    const auto code = static_cast<std::uint8_t>(c.in[pos]);
    if (code < 1 || code > wire::kLastRequest) {
      refuse(c.peer, fmt::format("unknown request code {}; not a dtrain store client", code));
      c.closing = true;
      break;
    }
    Reader reader(c.in, pos + 1);
    const auto state = answer(c, reader);
    if (state == Reader::Short) break;
    if (state == Reader::Bad) {
      c.closing = true;  // a length beyond the limits, or a counter that is not a number
      break;
    }
    pos = reader.pos();
  }
  c.in.erase(0, pos);
  if (c.closing) c.in.clear();
  // A begun request must be whole within the timeout; between requests a client may stay quiet
  // as long as it likes.
  if (c.in.empty() || c.waiting) {
    c.request_deadline = kNever;
  } else if (pos > 0 || c.request_deadline == kNever) {
    c.request_deadline = Clock::now() + timeout;
  }
  if (!flush(c)) return;
  if (connections.count(id)) arm(c);
}

Reader::State StoreServer::Impl::answer(Connection& c, Reader& in) {
  wire::Message reply;
  std::string key;
  std::string value;
  const auto code = static_cast<wire::Request>(static_cast<std::uint8_t>(c.in[in.pos() - 1]));
  switch (code) {
    case wire::Request::Set:
      if (!in.field(key) || !in.field(value)) return in.state();
      put(key, std::move(value));
      reply.u8(1);
      send(c, bytes_of(reply));
      notify(key);
      return Reader::Ok;
    case wire::Request::Get: {
      if (!in.field(key)) return in.state();
      const auto it = data.find(key);
      if (it == data.end()) {
        reply.u8(0);
        send(c, bytes_of(reply));
      } else {
        reply.u8(1).u32(static_cast<std::uint32_t>(it->second->size()));
        send(c, bytes_of(reply));
        send(c, it->second);
      }
      return Reader::Ok;
    }
    case wire::Request::Add: {
      std::int64_t delta = 0;
      if (!in.field(key) || !in.i64(delta)) return in.state();
      std::int64_t sum = delta;
      if (const auto it = data.find(key); it != data.end()) {
        try {
          sum += std::stoll(*it->second);
        } catch (const std::exception&) {
          return Reader::Bad;  // a key set to something that is not a number cannot be added to
        }
      }
      put(key, std::to_string(sum));
      reply.i64(sum);
      send(c, bytes_of(reply));
      notify(key);
      return Reader::Ok;
    }
    case wire::Request::Check: {
      std::uint32_t count = 0;
      if (!in.count(count)) return in.state();
      bool all = true;
      for (std::uint32_t i = 0; i < count; ++i) {
        if (!in.field(key)) return in.state();
        all = all && data.count(key) > 0;
      }
      reply.u8(all ? 1 : 0);
      send(c, bytes_of(reply));
      return Reader::Ok;
    }
    case wire::Request::CompareSet: {
      // c10d's rule: an absent key is set when `expected` is empty; a present one when it holds
      // `expected`; the reply is the value the key holds afterwards (or `expected` if absent).
      std::string expected;
      if (!in.field(key) || !in.field(expected) || !in.field(value)) return in.state();
      const auto it = data.find(key);
      bool wrote = false;
      if (it == data.end()) {
        reply.field(expected.empty() ? value : expected);
        if (expected.empty()) {
          put(key, std::move(value));
          wrote = true;
        }
      } else if (*it->second == expected) {
        reply.field(value);
        put(key, std::move(value));
        wrote = true;
      } else {
        reply.field(*it->second);
      }
      send(c, bytes_of(reply));
      if (wrote) notify(key);
      return Reader::Ok;
    }
    case wire::Request::Delete: {
      if (!in.field(key)) return in.state();
      const auto it = data.find(key);
      reply.u8(it != data.end() ? 1 : 0);
      if (it != data.end()) {
        value_bytes -= it->second->size();
        data.erase(it);
      }
      send(c, bytes_of(reply));
      return Reader::Ok;
    }
    case wire::Request::NumKeys:
      reply.i64(static_cast<std::int64_t>(data.size()));
      send(c, bytes_of(reply));
      return Reader::Ok;
    case wire::Request::Wait: {
      std::vector<std::string> keys;
      answer_wait(c, in, keys);
      return in.state();
    }
    case wire::Request::MultiGet: {
      std::uint32_t count = 0;
      if (!in.count(count)) return in.state();
      std::vector<Bytes> found;
      found.reserve(count);
      for (std::uint32_t i = 0; i < count; ++i) {
        if (!in.field(key)) return in.state();
        const auto it = data.find(key);
        found.push_back(it == data.end() ? nullptr : it->second);
      }
      // A large value (a round's member list) goes out as the store holds it, shared, not copied
      // into the reply; small ones (a member's record) are copied, to send few pieces.
      for (const auto& v : found) {
        if (v == nullptr) {
          reply.u8(0);
          continue;
        }
        reply.u8(1).u32(static_cast<std::uint32_t>(v->size()));
        if (v->size() < 4096) {
          reply.raw(v->data(), v->size());
          continue;
        }
        send(c, bytes_of(reply));
        send(c, v);
        reply = wire::Message();
      }
      send(c, bytes_of(reply));
      return Reader::Ok;
    }
  }
  return Reader::Bad;
}

void StoreServer::Impl::answer_wait(Connection& c, Reader& in, std::vector<std::string>& keys) {
  std::uint8_t any = 0;
  std::uint32_t count = 0;
  if (!in.u8(any) || !in.count(count)) return;
  keys.resize(count);
  for (auto& key : keys) {
    if (!in.field(key)) return;
  }
  std::int64_t wait_ms = 0;
  if (!in.i64(wait_ms)) return;
  c.wait_any = any != 0;
  c.wait_keys = std::move(keys);
  if (satisfied(c) || wait_ms <= 0) {
    wire::Message reply;
    reply.u8(satisfied(c) ? 1 : 0);
    send(c, bytes_of(reply));
    c.wait_keys.clear();
    return;
  }
  c.waiting = true;
  c.wait_deadline = Clock::now() + std::chrono::milliseconds(std::min<std::int64_t>(wait_ms, 1ll << 40));
  watch(c);
}

bool StoreServer::Impl::satisfied(const Connection& c) const {
  if (c.wait_any) {
    return std::any_of(c.wait_keys.begin(), c.wait_keys.end(),
                       [&](const auto& k) { return data.count(k) > 0; });
  }
  return std::all_of(c.wait_keys.begin(), c.wait_keys.end(),
                     [&](const auto& k) { return data.count(k) > 0; });
}

// Waiting for all keys needs a wake-up only from the first one missing; for any, from each.
void StoreServer::Impl::watch(Connection& c) {
  for (const auto& key : c.wait_keys) {
    if (data.count(key) > 0) continue;
    watchers[key].insert(c.id);
    c.watched.push_back(key);
    if (!c.wait_any) break;
  }
}

void StoreServer::Impl::unwatch(Connection& c) {
  for (const auto& key : c.watched) {
    const auto it = watchers.find(key);
    if (it == watchers.end()) continue;
    it->second.erase(c.id);
    if (it->second.empty()) watchers.erase(it);
  }
  c.watched.clear();
}

void StoreServer::Impl::notify(const std::string& key) {
  const auto it = watchers.find(key);
  if (it == watchers.end()) return;
  const std::unordered_set<std::uint64_t> ids = std::move(it->second);
  watchers.erase(it);
  for (const auto id : ids) {
    const auto found = connections.find(id);
    if (found == connections.end() || !found->second->waiting) continue;
    Connection& c = *found->second;
    unwatch(c);
    if (satisfied(c)) {
      finish_wait(c, true);
    } else {
      watch(c);
    }
  }
}

void StoreServer::Impl::finish_wait(Connection& c, bool set) {
  unwatch(c);
  c.waiting = false;
  c.wait_keys.clear();
  c.wait_deadline = kNever;
  wire::Message reply;
  reply.u8(set ? 1 : 0);
  send(c, bytes_of(reply));
  if (!c.in.empty()) resume.push_back(c.id);
  const std::uint64_t id = c.id;
  if (flush(c) && connections.count(id)) arm(c);
}

void StoreServer::Impl::put(const std::string& key, std::string value) {
  auto& slot = data[key];
  if (slot) value_bytes -= slot->size();
  value_bytes += value.size();
  slot = std::make_shared<const std::string>(std::move(value));
}

void StoreServer::Impl::send(Connection& c, Bytes bytes) {
  if (bytes->empty()) return;
  c.out_bytes += bytes->size();
  c.out.emplace_back(std::move(bytes), 0);
}

// Sends what it can without blocking; false when it closed the connection.
bool StoreServer::Impl::flush(Connection& c) {
  bool progress = false;
  while (!c.out.empty()) {
    auto& [bytes, offset] = c.out.front();
    const int more = c.out.size() > 1 ? MSG_MORE : 0;
    const ssize_t sent = ::send(c.fd, bytes->data() + offset, bytes->size() - offset, MSG_NOSIGNAL | more);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      close(c);
      return false;
    }
    progress = true;
    offset += static_cast<std::size_t>(sent);
    c.out_bytes -= static_cast<std::size_t>(sent);
    if (offset == bytes->size()) c.out.pop_front();
  }
  const bool want_write = !c.out.empty();
  if (want_write != c.writing) {
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP | (want_write ? EPOLLOUT : 0u);
    event.data.u64 = c.id;
    ::epoll_ctl(epoll, EPOLL_CTL_MOD, c.fd, &event);
    c.writing = want_write;
  }
  // A reply the peer does not read is given up after the timeout.
  if (!want_write) {
    c.send_deadline = kNever;
  } else if (progress || c.send_deadline == kNever) {
    c.send_deadline = Clock::now() + timeout;
  }
  if (!want_write && c.closing) {
    close(c);
    return false;
  }
  return true;
}

void StoreServer::Impl::arm(Connection& c) {
  auto when = std::min({c.request_deadline, c.send_deadline, c.wait_deadline});
  if (!c.proven) when = std::min(when, c.handshake_deadline);
  if (when == c.armed) return;
  if (c.armed != kNever) timers.erase({c.armed, c.id});
  if (when != kNever) timers.insert({when, c.id});
  c.armed = when;
}

void StoreServer::Impl::expire(Clock::time_point now) {
  while (!timers.empty() && timers.begin()->first <= now) {
    const std::uint64_t id = timers.begin()->second;
    timers.erase(timers.begin());
    const auto it = connections.find(id);
    if (it == connections.end()) continue;
    Connection& c = *it->second;
    c.armed = kNever;
    if (!c.proven && c.handshake_deadline <= now) {
      refuse(c.peer, "it did not answer the secret challenge (a client without the job's secret?)");
      close(c);
    } else if (c.request_deadline <= now || c.send_deadline <= now) {
      close(c);  // a request begun and never finished, or replies never read
    } else if (c.waiting && c.wait_deadline <= now) {
      finish_wait(c, false);
    } else {
      arm(c);
    }
  }
}

void StoreServer::Impl::close(Connection& c) {
  unwatch(c);
  if (c.armed != kNever) timers.erase({c.armed, c.id});
  ::epoll_ctl(epoll, EPOLL_CTL_DEL, c.fd, nullptr);
  ::shutdown(c.fd, SHUT_RDWR);
  ::close(c.fd);
  connections.erase(c.id);  // c is gone from here on
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
    event.data.u64 = kWakeTag;
    ::epoll_ctl(impl_->epoll, EPOLL_CTL_ADD, impl_->wake, &event);
    for (std::size_t i = 0; i < impl_->listeners.size(); ++i) {
      event.data.u64 = kListenerTag | i;
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
