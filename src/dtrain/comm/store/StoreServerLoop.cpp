// StoreServer's loop: the epoll loop, its connections (their bytes, replies and deadlines) and the
// handshake (Note [Store handshake] in comm/store/StoreWire.h). The server's setup is in
// StoreServer.cpp, the requests and waits in StoreServerRequests.cpp.
//
// One thread runs an epoll loop over the listening sockets and every connection, so
// that ten thousand members cost ten thousand sockets and a few hundred bytes each, not ten
// thousand threads. Every socket is non-blocking: a connection's bytes are gathered until a whole
// request (or handshake answer) is there, then answered; a peer that stalls holds nothing but its
// buffer, and its deadline (the handshake's, a begun request's, an unread reply's) closes it. A
// Wait parks the connection on the key it lacks until a write wakes it (Note [Store waits] in
// comm/store/StoreWire.h).
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dtrain/comm/store/StoreServerImpl.h"

namespace dtrain::comm {

using wire::Clock;

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

}  // namespace dtrain::comm
