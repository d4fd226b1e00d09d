// Ten thousand members of an elastic job on one machine (support/ElasticSimulation.h): every
// member gets a different rank of generation 0, and after one is lost the others agree on
// generation 1 with their ranks kept, the lost member's successors each moved down by one.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <vector>

#include "support/ElasticSimulation.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

TEST(ElasticScale, TenThousandMembersRendezvousAndSurviveALoss) {
  constexpr int kMembers = 10000;
  try {
    reserve_descriptors(kMembers + 128, "this test's store");
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << e.what();
  }
  ElasticOptions options;
  options.min_members = kMembers / 2;
  options.last_call = 200ms;
  options.timeout = 120s;
  options.run_id = "scale";
  const auto job = testing::simulate_elastic_job(kMembers, options, "scale-test-secret");
  ASSERT_EQ(job.error, "");
  std::vector<int> seen0(kMembers, 0);
  std::vector<int> seen1(kMembers - 1, 0);
  constexpr int kLost = kMembers / 2;
  for (const auto& m : job.members) {
    ASSERT_EQ(m.world0, kMembers);
    ASSERT_GE(m.rank0, 0);
    ASSERT_LT(m.rank0, kMembers);
    ++seen0[static_cast<std::size_t>(m.rank0)];
    if (m.rank0 == kLost) {
      EXPECT_EQ(m.rank1, -1);
      continue;
    }
    ASSERT_EQ(m.world1, kMembers - 1);
    // Survivors keep their order: the reference numbering is the old one without the lost rank.
    ASSERT_EQ(m.rank1, m.rank0 - (m.rank0 > kLost ? 1 : 0)) << "rank " << m.rank0;
    ++seen1[static_cast<std::size_t>(m.rank1)];
  }
  for (int n : seen0) ASSERT_EQ(n, 1);
  for (int n : seen1) ASSERT_EQ(n, 1);
  EXPECT_EQ(job.store.connections, static_cast<std::size_t>(kMembers + 1));
  std::printf("10000 members: rendezvous %.2f s, change %.2f s, %zu bytes a connection\n", job.rendezvous_s,
              job.change_s, job.store.connection_bytes / job.store.connections);
}

}  // namespace
}  // namespace dtrain::comm
