// See ElasticMembership.h, Note [Membership rounds].
#include "dtrain/comm/rendezvous/ElasticMembership.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

// A member's record as the store holds it: "<previous rank> <id>".
std::string record(const std::string& id, int previous_rank) {
  return fmt::format("{} {}", previous_rank, id);
}

// Parsed in place: every member reads every record of its round.
std::pair<int, std::string_view> parse_record(std::string_view text) {
  const auto space = text.find(' ');
  int previous = 0;
  const auto [end, error] =
      std::from_chars(text.data(), text.data() + std::min(space, text.size()), previous);
  if (space == std::string_view::npos || error != std::errc() || end != text.data() + space) {
    throw std::runtime_error("elastic membership: malformed record '" + std::string(text) + "'");
  }
  return {previous, text.substr(space + 1)};
}

// The new list as a change of the one before, when every survivor's record names its rank there:
// "<size before> <ranks lost, ascending>\n" and then the newcomers' records. `order` is the new
// list, survivors first by their previous rank.
using Order = std::vector<std::pair<std::pair<int, int>, const std::string*>>;
std::optional<std::string> change_since(const std::optional<std::string>& before, const Order& order) {
  if (!before) return std::nullopt;
  std::vector<std::string_view> ids;
  for (std::size_t begin = 0; begin < before->size();) {
    const auto end = std::min(before->find('\n', begin), before->size());
    ids.push_back(parse_record(std::string_view(*before).substr(begin, end - begin)).second);
    begin = end + 1;
  }
  std::vector<bool> kept(ids.size(), false);
  std::string newcomers;
  for (const auto& entry : order) {
    const auto [previous, id] = parse_record(*entry.second);
    if (previous < 0) {
      newcomers += *entry.second + "\n";
    } else if (static_cast<std::size_t>(previous) < ids.size() &&
               ids[static_cast<std::size_t>(previous)] == id && !kept[static_cast<std::size_t>(previous)] &&
               newcomers.empty()) {
      kept[static_cast<std::size_t>(previous)] = true;
    } else {
      return std::nullopt;  // a rank from an older generation, or one given twice
    }
  }
  std::string change = std::to_string(ids.size());
  for (std::size_t r = 0; r < ids.size(); ++r) {
    if (!kept[r]) change += " " + std::to_string(r);
  }
  return change + "\n" + newcomers;
}

// `m`'s rank and size from `previous`'s and a change_since() text, in the text's length: a survivor's
// new rank is its old one less the ranks lost below it. False when the change is not of `previous`'s
// list or does not keep `previous`'s member.
bool apply_change(const std::string& change, const Membership& previous, Membership& m) {
  const auto line_end = std::min(change.find('\n'), change.size());
  std::size_t size = 0;
  const char* end = change.data() + line_end;
  auto read = std::from_chars(change.data(), end, size);
  if (read.ec != std::errc() || size != static_cast<std::size_t>(previous.world_size)) return false;
  std::size_t lost = 0;
  std::size_t lost_below = 0;
  while (read.ptr < end) {
    std::size_t r = 0;
    read = std::from_chars(read.ptr + 1, end, r);
    if (read.ec != std::errc() || r >= size || r == static_cast<std::size_t>(previous.rank)) return false;
    ++lost;
    if (r < static_cast<std::size_t>(previous.rank)) ++lost_below;
  }
  const auto newcomers = static_cast<std::size_t>(
      std::count(change.begin() + static_cast<std::ptrdiff_t>(std::min(line_end + 1, change.size())),
                 change.end(), '\n'));
  m.rank = previous.rank - static_cast<int>(lost_below);
  m.world_size = static_cast<int>(size - lost + newcomers);
  return true;
}

// The list's records in rank order into `m` (ids and previous ranks), where `m` keeps it.
void read_list(const std::string& list, Membership& m) {
  for (std::size_t begin = 0; begin < list.size();) {
    const auto end = std::min(list.find('\n', begin), list.size());
    const auto [before, id] = parse_record(std::string_view(list).substr(begin, end - begin));
    m.members.emplace_back(id);
    m.previous_ranks.push_back(before);
    begin = end + 1;
  }
}

// This member's rank in the list (-1 when it is not there) and the list's size, without copying it.
std::pair<int, int> find_in_list(const std::string& list, std::string_view id) {
  int rank = -1;
  int size = 0;
  for (std::size_t begin = 0; begin < list.size(); ++size) {
    const auto end = std::min(list.find('\n', begin), list.size());
    if (rank < 0 && parse_record(std::string_view(list).substr(begin, end - begin)).second == id) rank = size;
    begin = end + 1;
  }
  return {rank, size};
}

}  // namespace

ElasticMembership::ElasticMembership(StoreClient& store, ElasticOptions options, std::string member_id)
    : store_(store), options_(std::move(options)), id_(std::move(member_id)) {
  if (options_.min_members < 1 || options_.max_members < options_.min_members) {
    throw std::invalid_argument(fmt::format("elastic membership: needs 1 <= MIN <= MAX, got {}:{}",
                                            options_.min_members, options_.max_members));
  }
  if (id_.empty() || id_.find('\n') != std::string::npos) {
    throw std::invalid_argument("elastic membership: a member id must be one non-empty line");
  }
}

std::string ElasticMembership::prefix(int generation) const {
  return fmt::format("elastic/{}/g{}/", options_.run_id, generation);
}

int ElasticMembership::lead(int generation) {
  const auto round = prefix(generation);
  // The leader alone polls, the arrival counter every 10 ms: one request whatever the number
  // arriving, where a wake-up per arrival would cost one per member.
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  auto last_change = start;
  std::int64_t seen = store_.add(round + "arrivals", 0);
  for (;;) {
    const auto now = Clock::now();
    if (seen >= options_.max_members) break;
    if (seen >= options_.min_members && now - last_change >= options_.last_call) break;
    throw_if_finished();
    if (now - start >= options_.timeout) {
      // Closed below MIN, so that those waiting learn it too.
      store_.set_if_absent(round + "closed", "0");
      throw std::runtime_error(fmt::format(
          "elastic membership: {} of at least {} members arrived within {} s (parallel.timeout_s)", seen,
          options_.min_members, std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto now_seen = store_.add(round + "arrivals", 0);
    if (now_seen != seen) last_change = Clock::now();
    seen = now_seen;
  }
  // Those who arrived up to now are in; a later arrival reads the count and moves on. Each writes
  // its record just after taking its number: the leader waits for them all in one request and
  // reads them in one more, up to the round's deadline, so that a member killed between the two
  // steps is left out instead of stalling the round.
  const auto admitted = static_cast<int>(std::min<std::int64_t>(seen, options_.max_members));
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(admitted));
  for (int i = 0; i < admitted; ++i) keys.push_back(round + "member/" + std::to_string(i));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  store_.wait_until(keys, std::max(left, options_.last_call), /*any=*/false);
  const auto records = store_.multi_get(keys);
  std::vector<std::pair<std::pair<int, int>, const std::string*>>
      order;  // ((survivor order, arrival), record)
  for (int i = 0; i < admitted; ++i) {
    const auto& text = records[static_cast<std::size_t>(i)];
    if (!text) continue;  // never written: the member died after arriving
    const int previous = parse_record(*text).first;
    order.push_back({{previous >= 0 ? previous : options_.max_members + i, i}, &*text});
  }
  std::sort(order.begin(), order.end());
  std::string list;
  for (const auto& entry : order) list += *entry.second + "\n";
  // The list and its change before the count: a member woken by the count finds them there.
  store_.set(round + "members", list);
  if (generation > 0) {
    if (auto change = change_since(store_.multi_get({prefix(generation - 1) + "members"})[0], order)) {
      store_.set(round + "change", *change);
    }
  }
  return std::stoi(store_.set_if_absent(round + "closed", std::to_string(admitted)));
}

Membership ElasticMembership::join(int generation, int previous_rank) {
  return join(generation, previous_rank, nullptr);
}

Membership ElasticMembership::join(const Membership& previous) {
  return join(previous.generation + 1, previous.rank, &previous);
}

Membership ElasticMembership::join(int generation, int previous_rank, const Membership* previous) {
  for (int g = generation;; ++g) {
    const auto round = prefix(g);
    const auto arrival = store_.add(round + "arrivals", 1) - 1;
    store_.set(round + "member/" + std::to_string(arrival), record(id_, previous_rank));
    if (arrival == 0) lead(g);
    // A member of the generation before reads the change since its list, when there is one.
    const bool from_previous = previous != nullptr && previous->generation == g - 1 && previous_rank >= 0 &&
                               previous->rank == previous_rank;
    std::optional<std::string> list;
    const int count = wait_closed(round, from_previous ? "change" : "members", list);
    if (count == 0) {
      throw std::runtime_error(fmt::format(
          "elastic membership: generation {} closed with fewer than {} members (the leader's timeout)", g,
          options_.min_members));
    }
    if (arrival >= count) continue;  // late for this round: the next one
    Membership m;
    m.generation = g;
    m.store_prefix = round + "pg/";
    if (!from_previous || !list || !apply_change(*list, *previous, m)) {
      if (from_previous || !list) list = store_.get(round + "members");
      std::tie(m.rank, m.world_size) = find_in_list(*list, id_);
      // Left out, its record having come after the leader stopped waiting: late, as above.
      if (m.rank < 0) continue;
      if (m.rank == 0) read_list(*list, m);
    } else if (m.rank == 0) {
      read_list(store_.get(round + "members"), m);
    }
    return m;
  }
}

int ElasticMembership::wait_closed(const std::string& round, const std::string& list_key,
                                   std::optional<std::string>& list) {
  // One Wait request parks this member on the server until the leader writes the count or the run
  // finishes (Note [Store waits] in comm/store/StoreWire.h): no polling, so the members waiting
  // cost the store nothing until the round closes.
  const std::string closed = round + "closed";
  const std::string finished = fmt::format("elastic/{}/finished", options_.run_id);
  // The leader may close up to the timeout after its own arrival, and a little later when it waited
  // for a dead member's record (lead()): a member allows for that beyond its own timeout.
  const auto allowed = options_.timeout + options_.last_call + std::chrono::seconds(1);
  if (store_.wait_until({closed, finished}, allowed, /*any=*/true)) {
    // The leader writes the list before the count: one request reads both.
    auto values = store_.multi_get({closed, finished, round + list_key});
    if (values[0]) {
      list = std::move(values[2]);
      return std::stoi(*values[0]);
    }
    throw_if_finished();
  }
  throw std::runtime_error(
      fmt::format("elastic membership: the round {} did not close within {} s", round,
                  std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count()));
}

void ElasticMembership::mark_finished() {
  store_.set(fmt::format("elastic/{}/finished", options_.run_id), "1");
}

void ElasticMembership::throw_if_finished() {
  if (store_.check({fmt::format("elastic/{}/finished", options_.run_id)})) {
    throw JobFinished(
        fmt::format("elastic job {}: the run finished before this worker was admitted", options_.run_id));
  }
}

bool ElasticMembership::someone_waiting(int generation) {
  return store_.add(prefix(generation + 1) + "arrivals", 0) > 0;
}

}  // namespace dtrain::comm
