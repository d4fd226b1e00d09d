// StoreServer's requests: each kind read from a connection's bytes and answered into its replies,
// and the waits parked on missing keys until a write wakes them (Note [Store waits] in
// comm/store/StoreWire.h).
#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/store/StoreServerImpl.h"

namespace dtrain::comm {

using wire::Clock;

auto StoreServer::Impl::answer(Connection& c, Reader& in) -> Reader::State {
  const auto code = static_cast<wire::Request>(static_cast<std::uint8_t>(c.in[in.pos() - 1]));
  switch (code) {
    case wire::Request::Set:
      return answer_set(c, in);
    case wire::Request::Get:
      return answer_get(c, in);
    case wire::Request::Add:
      return answer_add(c, in);
    case wire::Request::Check:
      return answer_check(c, in);
    case wire::Request::CompareSet:
      return answer_compare_set(c, in);
    case wire::Request::Delete:
      return answer_delete(c, in);
    case wire::Request::NumKeys:
      return answer_num_keys(c, in);
    case wire::Request::Wait: {
      std::vector<std::string> keys;
      answer_wait(c, in, keys);
      return in.state();
    }
    case wire::Request::MultiGet:
      return answer_multi_get(c, in);
  }
  return Reader::Bad;
}

auto StoreServer::Impl::answer_set(Connection& c, Reader& in) -> Reader::State {
  std::string key;
  std::string value;
  if (!in.field(key) || !in.field(value)) return in.state();
  put(key, std::move(value));
  wire::Message reply;
  reply.u8(1);
  send(c, bytes_of(reply));
  notify(key);
  return Reader::Ok;
}

auto StoreServer::Impl::answer_get(Connection& c, Reader& in) -> Reader::State {
  std::string key;
  if (!in.field(key)) return in.state();
  wire::Message reply;
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

auto StoreServer::Impl::answer_add(Connection& c, Reader& in) -> Reader::State {
  std::string key;
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
  wire::Message reply;
  reply.i64(sum);
  send(c, bytes_of(reply));
  notify(key);
  return Reader::Ok;
}

auto StoreServer::Impl::answer_check(Connection& c, Reader& in) -> Reader::State {
  std::string key;
  std::uint32_t count = 0;
  if (!in.count(count)) return in.state();
  bool all = true;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (!in.field(key)) return in.state();
    all = all && data.count(key) > 0;
  }
  wire::Message reply;
  reply.u8(all ? 1 : 0);
  send(c, bytes_of(reply));
  return Reader::Ok;
}

// c10d's rule: an absent key is set when `expected` is empty; a present one when it holds
// `expected`; the reply is the value the key holds afterwards (or `expected` if absent).
auto StoreServer::Impl::answer_compare_set(Connection& c, Reader& in) -> Reader::State {
  std::string key;
  std::string expected;
  std::string value;
  if (!in.field(key) || !in.field(expected) || !in.field(value)) return in.state();
  wire::Message reply;
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

auto StoreServer::Impl::answer_delete(Connection& c, Reader& in) -> Reader::State {
  std::string key;
  if (!in.field(key)) return in.state();
  wire::Message reply;
  const auto it = data.find(key);
  reply.u8(it != data.end() ? 1 : 0);
  if (it != data.end()) {
    value_bytes -= it->second->size();
    data.erase(it);
  }
  send(c, bytes_of(reply));
  return Reader::Ok;
}

auto StoreServer::Impl::answer_num_keys(Connection& c, Reader& in) -> Reader::State {
  wire::Message reply;
  reply.i64(static_cast<std::int64_t>(data.size()));
  send(c, bytes_of(reply));
  return Reader::Ok;
}

auto StoreServer::Impl::answer_multi_get(Connection& c, Reader& in) -> Reader::State {
  std::string key;
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
  wire::Message reply;
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

}  // namespace dtrain::comm
