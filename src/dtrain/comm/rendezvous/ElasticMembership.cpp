// See ElasticMembership.h, Note [Membership rounds].
#include "dtrain/comm/rendezvous/ElasticMembership.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

// A member's record as the store holds it: "<previous rank> <id>".
std::string record(const std::string& id, int previous_rank) {
  return fmt::format("{} {}", previous_rank, id);
}

std::pair<int, std::string> parse_record(const std::string& text) {
  const auto space = text.find(' ');
  if (space == std::string::npos)
    throw std::runtime_error("elastic membership: malformed record '" + text + "'");
  return {std::stoi(text.substr(0, space)), text.substr(space + 1)};
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

int ElasticMembership::lead(const std::string& round) {
  const auto start = Clock::now();
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
  const int members = static_cast<int>(std::min<std::int64_t>(seen, options_.max_members));
  // Those who arrived up to now are in; a later arrival reads the count and moves on.
  const auto closed = store_.set_if_absent(round + "closed", std::to_string(members));
  const int count = std::stoi(closed);
  std::vector<std::pair<std::pair<int, int>, std::string>> order;  // ((survivor order, arrival), record)
  for (int i = 0; i < count; ++i) {
    const auto text = store_.get(round + "member/" + std::to_string(i));
    const auto [previous, id] = parse_record(text);
    order.push_back({{previous >= 0 ? previous : options_.max_members + i, i}, text});
  }
  std::sort(order.begin(), order.end());
  std::string list;
  for (const auto& entry : order) list += entry.second + "\n";
  store_.set(round + "members", list);
  return count;
}

Membership ElasticMembership::join(int generation, int previous_rank) {
  for (int g = generation;; ++g) {
    const auto round = prefix(g);
    const auto arrival = store_.add(round + "arrivals", 1) - 1;
    store_.set(round + "member/" + std::to_string(arrival), record(id_, previous_rank));
    if (arrival == 0) lead(round);
    const int count = wait_closed(round);
    if (count == 0) {
      throw std::runtime_error(fmt::format(
          "elastic membership: generation {} closed with fewer than {} members (the leader's timeout)", g,
          options_.min_members));
    }
    if (arrival >= count) continue;  // late for this round: the next one
    Membership m;
    m.rank = -1;
    m.generation = g;
    m.world_size = count;
    m.store_prefix = round + "pg/";
    std::istringstream lines(store_.get(round + "members"));
    for (std::string line; std::getline(lines, line);) {
      const auto [previous, id] = parse_record(line);
      if (id == id_) m.rank = static_cast<int>(m.members.size());
      m.members.push_back(id);
      m.previous_ranks.push_back(previous);
    }
    if (static_cast<int>(m.members.size()) != count || m.rank < 0) {
      throw std::runtime_error(
          fmt::format("elastic membership: generation {} lists {} members, not {} with {}", g,
                      m.members.size(), count, id_));
    }
    return m;
  }
}

int ElasticMembership::wait_closed(const std::string& round) {
  // Every waiting member polls the one store: from 5 ms, backing off to 100 ms, so that a thousand
  // of them ask a few thousand times a second, not a hundred thousand; whether the run finished is
  // asked every fourth time.
  const auto deadline = Clock::now() + options_.timeout;
  auto pause = std::chrono::milliseconds(5);
  for (int poll = 0; !store_.check({round + "closed"}); ++poll) {
    if (poll % 4 == 3) throw_if_finished();
    if (Clock::now() >= deadline) {
      throw std::runtime_error(
          fmt::format("elastic membership: the round {} did not close within {} s", round,
                      std::chrono::duration_cast<std::chrono::seconds>(options_.timeout).count()));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
  return std::stoi(store_.get(round + "closed"));
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
