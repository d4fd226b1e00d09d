// The wire of dtrain's rendezvous store (comm/store/StoreServer, comm/store/StoreClient): sockets with
// deadlines, length-prefixed fields, the request codes, and the shared-secret handshake that a
// connection passes before any key is read or written. Internal to comm/.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::comm::wire {

// Note [Store handshake]
// On accepting a connection the server sends kGreeting, one flag byte (1: a secret is required)
// and, when required, a 32-byte random challenge. A client with the secret answers
// HMAC-SHA256(secret, "dtrain-store client" + challenge) and a challenge of its own; the server
// answers one byte (1: accepted) and HMAC-SHA256(secret, "dtrain-store server" + that challenge),
// so each side proves it knows the secret without sending it, and a replayed answer is worthless
// against a fresh challenge. Only then does the server read requests: a client without the secret
// (dtrain's or anything else that connects) is refused before it can read or write a key. The
// secret authenticates who joins; it does not encrypt: keys and values travel in the clear
// (docs/faults-and-security.md, "Who may join"). A client that has a secret refuses a server that asks for
// none, which could be anyone listening on that port.
inline constexpr char kGreeting[8] = {'D', 'T', 'S', 'T', 'O', 'R', 'E', '1'};
inline constexpr std::size_t kDigestBytes = 32;
using Digest = std::array<std::uint8_t, kDigestBytes>;

enum class Request : std::uint8_t {
  Set = 1,         // key, value -> u8 1
  Get = 2,         // key -> u8 found [, value]
  Add = 3,         // key, i64 -> i64 (the value, kept as decimal text like c10d's TCPStore)
  Check = 4,       // u32 count, keys -> u8 all set
  CompareSet = 5,  // key, expected, desired -> value (c10d::Store::compareSet's rule)
  Delete = 6,      // key -> u8 deleted
  NumKeys = 7,     // -> i64
  // Added after the first protocol (Note [Store waits]); a client of that protocol never sends them.
  Wait = 8,      // u8 any, u32 count, keys, i64 timeout ms -> u8 1 set / 0 timed out
  MultiGet = 9,  // u32 count, keys -> for each key: u8 found [, value]
};
inline constexpr std::uint8_t kLastRequest = 9;

// Note [Store waits]
// A client that needs a key which is not set yet sends Wait with the keys, whether all or any of
// them must be set, and how long it will wait. The server answers at once when the keys are
// there; otherwise it parks the connection on the first missing key (on every key, for any) and
// answers 1 when a Set, Add or CompareSet writes the key that completes it, or 0 at the given
// timeout. So a member waiting for a round costs the server nothing until the round closes, and
// the close is one write that wakes every waiter: no polling, whatever the number waiting. The
// server always answers a Wait by its deadline, so a client that times out reads its 0 and the
// connection stays in step. The greeting still says DTSTORE1: clients of the first protocol,
// which never send codes 8 and 9, are served unchanged; a client that sends them to a server of
// the first protocol is refused as "unknown request code", so a job's store and its members come
// from one dtrain build.

// Largest key or value accepted, so that a length field cannot make the server allocate without bound.
inline constexpr std::uint32_t kMaxField = 64u << 20;

using Clock = std::chrono::steady_clock;

// Writes/reads exactly n bytes before `deadline`; false on a closed connection, an error or the
// deadline passing.
bool send_all(int fd, const void* data, std::size_t n, Clock::time_point deadline);
bool recv_all(int fd, void* data, std::size_t n, Clock::time_point deadline);

// A request or reply being put together, then sent in one write.
class Message {
 public:
  Message& u8(std::uint8_t v);
  Message& u32(std::uint32_t v);
  Message& i64(std::int64_t v);
  Message& bytes(const void* data, std::size_t n);  // a u32 length, then the bytes
  Message& field(const std::string& s) { return bytes(s.data(), s.size()); }
  Message& field(const std::vector<std::uint8_t>& v) { return bytes(v.data(), v.size()); }
  Message& raw(const void* data, std::size_t n);
  bool send(int fd, Clock::time_point deadline) const {
    return send_all(fd, data_.data(), data_.size(), deadline);
  }
  const std::vector<std::uint8_t>& data() const { return data_; }

 private:
  std::vector<std::uint8_t> data_;
};

// Reading fields from a connection; each returns false on failure (closed, too long, deadline).
bool read_u8(int fd, std::uint8_t& v, Clock::time_point deadline);
bool read_u32(int fd, std::uint32_t& v, Clock::time_point deadline);
bool read_i64(int fd, std::int64_t& v, Clock::time_point deadline);
bool read_field(int fd, std::string& v, Clock::time_point deadline);

Digest random_digest();
// HMAC-SHA256(secret, label + challenge).
Digest prove(const std::string& secret, const char* label, const Digest& challenge);
bool same(const Digest& a, const Digest& b);  // in constant time

inline constexpr const char* kClientLabel = "dtrain-store client";
inline constexpr const char* kServerLabel = "dtrain-store server";

// "host:port" of a connected socket's peer, for messages.
std::string peer_address(int fd);

}  // namespace dtrain::comm::wire
