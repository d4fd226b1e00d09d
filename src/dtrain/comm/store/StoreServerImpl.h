// StoreServer's inside, shared by its files: the loop's state (StoreServer::Impl) and a Reader of
// request fields. StoreServer.cpp sets the server up and answers its public calls,
// StoreServerLoop.cpp runs the epoll loop and its connections, StoreServerRequests.cpp the requests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dtrain/comm/store/StoreServer.h"
#include "dtrain/comm/store/StoreWire.h"

namespace dtrain::comm {

struct StoreServer::Impl {
  // A reply's bytes, shared with the store when they are a value (a round's member list is sent to
  // every member without a copy each).
  using Bytes = std::shared_ptr<const std::string>;

  static Bytes bytes_of(const wire::Message& m) {
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

  static constexpr auto kNever = wire::Clock::time_point::max();
  static constexpr std::uint64_t kListenerTag = 1ull << 63;
  static constexpr std::uint64_t kWakeTag = kListenerTag - 1;

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
    wire::Clock::time_point handshake_deadline = kNever, request_deadline = kNever, send_deadline = kNever,
                            wait_deadline = kNever, armed = kNever;
  };
  std::unordered_map<std::string, Bytes> data;
  std::size_t value_bytes = 0;
  std::uint64_t next_id = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections;
  std::unordered_map<std::string, std::unordered_set<std::uint64_t>> watchers;
  std::set<std::pair<wire::Clock::time_point, std::uint64_t>> timers;
  std::vector<std::uint64_t> resume;  // woken waiters with requests behind their Wait

  void listen_on(const std::string& address, int wanted_port);
  void run();
  void accept_from(int listener);
  void on_event(Connection& c, std::uint32_t events);
  void process(Connection& c);
  bool handshake(Connection& c);
  Reader::State answer(Connection& c, Reader& in);
  // One per request kind, Note [Store waits] in comm/store/StoreWire.h for Wait.
  Reader::State answer_set(Connection& c, Reader& in);
  Reader::State answer_get(Connection& c, Reader& in);
  Reader::State answer_add(Connection& c, Reader& in);
  Reader::State answer_check(Connection& c, Reader& in);
  Reader::State answer_compare_set(Connection& c, Reader& in);
  Reader::State answer_delete(Connection& c, Reader& in);
  Reader::State answer_num_keys(Connection& c, Reader& in);
  Reader::State answer_multi_get(Connection& c, Reader& in);
  void answer_wait(Connection& c, Reader& in, std::vector<std::string>& keys);
  void send(Connection& c, Bytes bytes);
  bool flush(Connection& c);
  void close(Connection& c);
  void arm(Connection& c);
  void expire(wire::Clock::time_point now);
  void put(const std::string& key, std::string value);
  void notify(const std::string& key);
  bool satisfied(const Connection& c) const;
  void watch(Connection& c);
  void unwatch(Connection& c);
  void finish_wait(Connection& c, bool set);
  void refuse(const std::string& peer, const std::string& why);
  StoreServerStats stats();
};

}  // namespace dtrain::comm
