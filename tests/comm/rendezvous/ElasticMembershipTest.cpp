// Membership rounds on a real store, members as threads (Note [Membership rounds]).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/rendezvous/ElasticMembership.h"
#include "dtrain/comm/store/StoreServer.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

ElasticOptions options(int min, int max, std::chrono::milliseconds last_call = 200ms) {
  ElasticOptions o;
  o.min_members = min;
  o.max_members = max;
  o.last_call = last_call;
  o.timeout = 20s;
  o.run_id = "test";
  return o;
}

// Joins generation `generation` as `id` (previous rank `previous`) over a connection of its own.
std::future<Membership> join_async(int port, const ElasticOptions& o, const std::string& id, int generation,
                                   int previous) {
  return std::async(std::launch::async, [=] {
    StoreClient store("127.0.0.1", port, 20s);
    ElasticMembership membership(store, o, id);
    return membership.join(generation, previous);
  });
}

TEST(ElasticMembership, MembersUpToMaxAgreeOnOneNumbering) {
  StoreServer server;
  std::vector<std::future<Membership>> joins;
  for (const auto* id : {"a", "b", "c"}) joins.push_back(join_async(server.port(), options(2, 3), id, 0, -1));
  std::vector<Membership> got;
  for (auto& j : joins) got.push_back(j.get());
  std::vector<bool> rank_taken(3, false);
  for (const auto& m : got) {
    EXPECT_EQ(m.generation, 0);
    EXPECT_EQ(m.world_size, 3);
    // Rank 0 alone holds the list (Note [Membership rounds]): every member at its rank.
    if (m.rank == 0) {
      ASSERT_EQ(m.members.size(), 3U);
      for (const auto& other : got) {
        EXPECT_EQ(m.members[static_cast<std::size_t>(other.rank)], std::string(1, "abc"[&other - &got[0]]));
      }
    } else {
      EXPECT_TRUE(m.members.empty());
    }
    ASSERT_GE(m.rank, 0);
    ASSERT_LT(m.rank, 3);
    EXPECT_FALSE(rank_taken[m.rank]) << "rank " << m.rank << " given twice";
    rank_taken[m.rank] = true;
    EXPECT_EQ(m.store_prefix, "elastic/test/g0/pg/");
  }
}

TEST(ElasticMembership, SurvivorsKeepTheirOrderAndNewcomersComeAfter) {
  StoreServer server;
  auto newcomer = join_async(server.port(), options(3, 3), "new", 4, -1);
  auto was_two = join_async(server.port(), options(3, 3), "x", 4, 2);
  auto was_zero = join_async(server.port(), options(3, 3), "y", 4, 0);
  const auto n = newcomer.get();
  const auto x = was_two.get();
  const auto y = was_zero.get();
  EXPECT_EQ(y.rank, 0);
  EXPECT_EQ(x.rank, 1);
  EXPECT_EQ(n.rank, 2);
  EXPECT_EQ(y.members, (std::vector<std::string>{"y", "x", "new"}));
  EXPECT_EQ(y.previous_ranks, (std::vector<int>{0, 2, -1}));
  EXPECT_TRUE(n.members.empty());
  EXPECT_TRUE(x.previous_ranks.empty());
}

TEST(ElasticMembership, ALateMemberWaitsForTheNextRoundWhichTheRunningOneSees) {
  StoreServer server;
  const auto o = options(2, 3, 100ms);
  auto a = join_async(server.port(), o, "a", 0, -1);
  auto b = join_async(server.port(), o, "b", 0, -1);
  const auto ma = a.get();
  const auto mb = b.get();
  ASSERT_EQ(ma.world_size, 2);
  StoreClient store("127.0.0.1", server.port(), 20s);
  ElasticMembership watcher(store, o, "a");
  EXPECT_FALSE(watcher.someone_waiting(0));
  // Round 0 is closed: the late member lands in round 1 and the running generation sees it.
  auto late = join_async(server.port(), o, "late", 0, -1);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!watcher.someone_waiting(0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(watcher.someone_waiting(0));
  auto again_a = join_async(server.port(), o, "a", 1, ma.rank);
  auto again_b = join_async(server.port(), o, "b", 1, mb.rank);
  const auto ml = late.get();
  EXPECT_EQ(ml.generation, 1);
  EXPECT_EQ(ml.world_size, 3);
  EXPECT_EQ(ml.rank, 2);
  EXPECT_EQ(again_a.get().rank, ma.rank);
  EXPECT_EQ(again_b.get().rank, mb.rank);
}

TEST(ElasticMembership, FewerThanMinByTheTimeoutIsAnErrorNamingTheCounts) {
  StoreServer server;
  auto o = options(3, 4);
  o.timeout = 300ms;
  StoreClient store("127.0.0.1", server.port(), 20s);
  ElasticMembership alone(store, o, "alone");
  try {
    alone.join(0, -1);
    FAIL() << "a round of 1 with MIN 3 was closed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of at least 3 members"), std::string::npos) << e.what();
  }
}

TEST(ElasticMembership, AMemberWaitingWhenTheRunFinishesLearnsItAndStops) {
  StoreServer server;
  auto waiting = join_async(server.port(), options(2, 2), "late", 0, -1);
  StoreClient store("127.0.0.1", server.port(), 20s);
  ElasticMembership job(store, options(2, 2), "rank0");
  job.mark_finished();
  try {
    waiting.get();
    FAIL() << "a member joined a finished job";
  } catch (const JobFinished& e) {
    EXPECT_NE(std::string(e.what()).find("finished before this worker was admitted"), std::string::npos)
        << e.what();
  }
}

// Survivors that kept their generation's Membership read only what changed (Note [Membership
// rounds]) and take the ranks the whole list gives them; rank 0 alone holds the list.
TEST(ElasticMembership, SurvivorsTakeTheirRanksFromTheChangeAlone) {
  StoreServer server;
  const auto o = options(3, 3);
  std::vector<std::future<Membership>> first;
  for (const auto* id : {"a", "b", "c"}) first.push_back(join_async(server.port(), o, id, 0, -1));
  std::vector<Membership> g0;
  for (auto& f : first) g0.push_back(f.get());
  // "b" is lost; "a" and "c" come back with their Membership, "d" is new.
  auto survive = [&](const Membership& previous, const std::string& id) {
    return std::async(std::launch::async, [=, port = server.port()] {
      StoreClient store("127.0.0.1", port, 20s);
      ElasticMembership membership(store, o, id);
      return membership.join(previous);
    });
  };
  auto a = survive(g0[0], "a");
  auto c = survive(g0[2], "c");
  auto d = join_async(server.port(), o, "d", 1, -1);
  const auto ma = a.get();
  const auto mc = c.get();
  const auto md = d.get();
  // The reference: the survivors in their old order, then the newcomer.
  std::vector<std::pair<int, std::string>> survivors{{g0[0].rank, "a"}, {g0[2].rank, "c"}};
  std::sort(survivors.begin(), survivors.end());
  const std::vector<std::string> members{survivors[0].second, survivors[1].second, "d"};
  const std::vector<int> previous{survivors[0].first, survivors[1].first, -1};
  for (const auto* m : {&ma, &mc, &md}) {
    EXPECT_EQ(m->generation, 1);
    EXPECT_EQ(m->world_size, 3);
    EXPECT_EQ(m->members, m->rank == 0 ? members : std::vector<std::string>{});
    EXPECT_EQ(m->previous_ranks, m->rank == 0 ? previous : std::vector<int>{});
  }
  EXPECT_EQ(members[static_cast<std::size_t>(ma.rank)], "a");
  EXPECT_EQ(members[static_cast<std::size_t>(mc.rank)], "c");
  EXPECT_EQ(md.rank, 2);
  StoreClient store("127.0.0.1", server.port(), 20s);
  EXPECT_TRUE(store.check({"elastic/test/g1/change"})) << "the leader wrote no change";
}

// A member that takes its arrival number and dies before writing its record: the leader waits for
// the record no longer than the round's timeout (parallel.timeout_s) and closes without it.
TEST(ElasticMembership, AMemberKilledMidRoundDoesNotStallTheRoundPastTheTimeout) {
  StoreServer server;
  auto o = options(2, 3);
  o.timeout = 2s;
  const auto start = std::chrono::steady_clock::now();
  auto a = join_async(server.port(), o, "a", 0, -1);
  StoreClient store("127.0.0.1", server.port(), 20s);
  while (store.add("elastic/test/g0/arrivals", 0) < 1) std::this_thread::sleep_for(1ms);
  {
    StoreClient killed("127.0.0.1", server.port(), 20s);
    killed.add("elastic/test/g0/arrivals", 1);  // arrived, and gone before its record
  }
  auto b = join_async(server.port(), o, "b", 0, -1);
  const auto ma = a.get();
  const auto mb = b.get();
  EXPECT_LT(std::chrono::steady_clock::now() - start, o.timeout + 1s);
  EXPECT_EQ(ma.world_size, 2);
  EXPECT_EQ(mb.world_size, 2);
  EXPECT_EQ(ma.members, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(mb.members.empty());
  EXPECT_EQ(ma.rank, 0);
  EXPECT_EQ(mb.rank, 1);
}

TEST(ElasticMembership, RefusesMinAboveMax) {
  StoreServer server;
  StoreClient store("127.0.0.1", server.port(), 20s);
  EXPECT_THROW(ElasticMembership(store, options(3, 2), "a"), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::comm
