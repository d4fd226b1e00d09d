// The distributed sampler: ranks recompute the same orders from (seed, epoch), every epoch
// reshuffles, and every rank gets the same number of batches even with unequal shares.
#include "DataTestUtil.h"
#include "dtrain/data/Sampler.h"

using namespace dtrain::data;

namespace {
Shard uneven_shard(int rank) {
  // Ranks of 10, 7 and 3 samples.
  std::vector<std::int64_t> sizes{10, 7, 3};
  std::int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += sizes[static_cast<std::size_t>(r)];
  Shard s;
  s.rank = rank;
  s.world = 3;
  s.indices = torch::arange(begin, begin + sizes[static_cast<std::size_t>(rank)], torch::kLong);
  s.held_out = torch::empty({0}, torch::kLong);
  s.rank_sizes = sizes;
  return s;
}
}  // namespace

TEST(Sampler, SameSeedAndEpochGiveSameOrder) {
  SamplerOptions o;
  o.batch_size = 4;
  DistributedSampler a(uneven_shard(0), o, 42), b(uneven_shard(0), o, 42), c(uneven_shard(0), o, 43);
  EXPECT_TRUE(torch::equal(a.epoch_order(3), b.epoch_order(3)));
  EXPECT_FALSE(torch::equal(a.epoch_order(3), a.epoch_order(4)));
  EXPECT_FALSE(torch::equal(a.epoch_order(3), c.epoch_order(3)));
  // An epoch is a permutation of the rank's own samples.
  EXPECT_TRUE(torch::equal(std::get<0>(a.epoch_order(3).sort()), torch::arange(10, torch::kLong)));
}

TEST(Sampler, PadGivesEveryRankTheSameBatches) {
  for (bool drop_last : {true, false}) {
    SamplerOptions o;
    o.batch_size = 4;
    o.drop_last = drop_last;
    std::vector<std::int64_t> batches;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler s(uneven_shard(r), o, 1);
      batches.push_back(s.batches_per_epoch());
      auto order = s.epoch_order(0);
      EXPECT_EQ(order.size(0), 10);
      // Padding repeats only the rank's own samples, each at most ceil(10 / size) times.
      auto own = uneven_shard(r).indices;
      EXPECT_TRUE(torch::isin(order, own).all().item<bool>());
    }
    EXPECT_EQ(batches, std::vector<std::int64_t>(3, drop_last ? 2 : 3));
  }
}

TEST(Sampler, DropTruncatesToTheSmallestShare) {
  SamplerOptions o;
  o.batch_size = 2;
  o.drop_last = false;
  o.equalize = Equalize::drop;
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(uneven_shard(r), o, 1);
    EXPECT_EQ(s.samples_per_epoch(), 3);
    EXPECT_EQ(s.batches_per_epoch(), 2);
    EXPECT_EQ(s.batch_indices(s.epoch_order(0), 1).size(0), 1);
  }
}

TEST(Sampler, BatchSeedsDifferByRankEpochAndBatch) {
  SamplerOptions o;
  o.batch_size = 2;
  DistributedSampler r0(uneven_shard(0), o, 1), r1(uneven_shard(1), o, 1);
  EXPECT_EQ(r0.batch_seed(2, 3), DistributedSampler(uneven_shard(0), o, 1).batch_seed(2, 3));
  EXPECT_NE(r0.batch_seed(2, 3), r1.batch_seed(2, 3));
  EXPECT_NE(r0.batch_seed(2, 3), r0.batch_seed(3, 3));
  EXPECT_NE(r0.batch_seed(2, 3), r0.batch_seed(2, 4));
}

TEST(Sampler, BatchLargerThanShareIsAClearError) {
  SamplerOptions o;
  o.batch_size = 64;
  o.equalize = Equalize::none;
  EXPECT_THAT(dtrain::data::testing::error_of([&] { DistributedSampler(uneven_shard(2), o, 0); }),
              ::testing::HasSubstr("data.batch_size: 64 is larger than the 3 samples"));
}
