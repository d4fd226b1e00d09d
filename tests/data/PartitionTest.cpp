// Partitions: disjoint and covering shares with the class structure each scheme promises, the
// same on every rank for one seed.
#include "DataTestUtil.h"
#include "dtrain/data/Partition.h"
#include "dtrain/data/Random.h"

#include <set>

using namespace dtrain::data;
using namespace dtrain::data::testing;
using ::testing::HasSubstr;

namespace {

// n samples of `classes` classes drawn at random (so class sizes differ).
torch::Tensor make_labels(std::int64_t n = 1000, std::int64_t classes = 10) {
  auto gen = make_generator(7);
  return torch::randint(0, classes, {n}, gen, torch::kLong);
}

// Every index in [0, n) exactly once across the shares (and the held-out fold).
void expect_disjoint_cover(const std::vector<Shard>& shards, std::int64_t n, bool include_held_out) {
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  auto mark = [&](const torch::Tensor& idx) {
    for (std::int64_t i = 0; i < idx.size(0); ++i)
      ++seen[static_cast<std::size_t>(idx[i].item<std::int64_t>())];
  };
  for (const auto& s : shards) mark(s.indices);
  if (include_held_out) mark(shards[0].held_out);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<std::size_t>(i)], 1) << "sample " << i;
}

std::set<std::int64_t> classes_of(const Shard& s, const torch::Tensor& labels) {
  auto l = labels.index_select(0, s.indices);
  std::set<std::int64_t> out;
  for (std::int64_t i = 0; i < l.size(0); ++i) out.insert(l[i].item<std::int64_t>());
  return out;
}

PartitionOptions scheme(const std::string& name) {
  PartitionOptions o;
  o.scheme = name;
  return o;
}

}  // namespace

TEST(Partition, RandomIsDisjointCoveringAndBalanced) {
  auto labels = make_labels();
  auto shards = partition_all(3, scheme("random"), labels, 11);
  expect_disjoint_cover(shards, 1000, false);
  EXPECT_LE(shards[0].max_size() - shards[0].min_size(), 1);
  EXPECT_EQ(shards[2].rank_sizes, shards[0].rank_sizes);
  // Same seed, same shares; another seed, other shares.
  EXPECT_TRUE(torch::equal(partition(1, 3, scheme("random"), labels, 11).indices, shards[1].indices));
  EXPECT_FALSE(torch::equal(partition(1, 3, scheme("random"), labels, 12).indices, shards[1].indices));
}

TEST(Partition, HeteroGivesEachRankItsClasses) {
  auto labels = make_labels();
  auto o = scheme("hetero");
  o.classes_per_rank = 2;
  auto shards = partition_all(5, o, labels, 3);
  expect_disjoint_cover(shards, 1000, false);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(classes_of(shards[r], labels), (std::set<std::int64_t>{2 * r, 2 * r + 1})) << "rank " << r;
  }
}

TEST(Partition, HeteroSharesClassesWhenRanksOutnumberThem) {
  auto labels = make_labels();
  auto o = scheme("hetero");
  o.classes_per_rank = 3;
  auto shards = partition_all(8, o, labels, 3);  // 24 class slots over 10 classes
  expect_disjoint_cover(shards, 1000, false);
  for (const auto& s : shards) EXPECT_EQ(classes_of(s, labels).size(), 3u);
}

TEST(Partition, HeteroLeftoverClassesStillCovered) {
  auto labels = make_labels();
  auto o = scheme("hetero");
  o.classes_per_rank = 2;
  auto shards = partition_all(3, o, labels, 3);  // 6 slots, 10 classes: 4 go round-robin
  expect_disjoint_cover(shards, 1000, false);
  std::size_t total = 0;
  for (const auto& s : shards) {
    EXPECT_GE(classes_of(s, labels).size(), 2u);
    total += classes_of(s, labels).size();
  }
  EXPECT_EQ(total, 10u);
}

TEST(Partition, DirichletSkewShrinksWithAlpha) {
  auto labels = make_labels(2000);
  auto skew = [&](double alpha) {
    auto o = scheme("dirichlet");
    o.dirichlet_alpha = alpha;
    auto shards = partition_all(4, o, labels, 5);
    expect_disjoint_cover(shards, 2000, false);
    // Mean over ranks of the largest class fraction in the rank's share.
    double sum = 0;
    for (const auto& s : shards) {
      auto counts = torch::bincount(labels.index_select(0, s.indices), {}, 10).to(torch::kDouble);
      sum += (counts.max() / counts.sum()).item<double>();
    }
    return sum / 4;
  };
  const double skewed = skew(0.1), even = skew(100.0);
  EXPECT_GT(skewed, 0.3);
  EXPECT_LT(even, 0.2);
}

TEST(Partition, KfoldHoldsOutFoldK) {
  auto labels = make_labels();
  auto o = scheme("kfold");
  o.num_folds = 5;
  o.fold = 2;
  auto shards = partition_all(2, o, labels, 9);
  expect_disjoint_cover(shards, 1000, true);
  EXPECT_EQ(shards[0].held_out.size(0), 200);
  EXPECT_TRUE(torch::equal(shards[0].held_out, shards[1].held_out));
  EXPECT_EQ(shards[0].size() + shards[1].size(), 800);
  // Different folds are disjoint held-out sets that together cover the data.
  std::vector<Shard> folds;
  for (int k = 0; k < 5; ++k) {
    o.fold = k;
    Shard s = partition(0, 1, o, labels, 9);
    s.indices = s.held_out;
    folds.push_back(s);
  }
  expect_disjoint_cover(folds, 1000, false);
}

TEST(Partition, SubsetTakesTheFirstN) {
  auto labels = make_labels();
  auto o = scheme("subset");
  o.subset_size = 100;
  auto shards = partition_all(3, o, labels, 0);
  expect_disjoint_cover(shards, 100, false);
  EXPECT_EQ(shards[1].indices[0].item<std::int64_t>(), 1);
  EXPECT_EQ(shards[1].indices[1].item<std::int64_t>(), 4);
}

TEST(Partition, ErrorsSayWhatToChange) {
  auto labels = make_labels();
  EXPECT_THAT(error_of([&] { partition_all(2, scheme("iid"), labels, 0); }),
              HasSubstr("expected one of: random, hetero, dirichlet, kfold, subset"));
  auto o = scheme("kfold");
  o.fold = 5;
  EXPECT_THAT(error_of([&] { partition_all(2, o, labels, 0); }), HasSubstr("data.fold: expected 0..4"));
  auto h = scheme("hetero");
  h.classes_per_rank = 11;
  EXPECT_THAT(error_of([&] { partition_all(2, h, labels, 0); }), HasSubstr("data.classes_per_rank"));
}

namespace dtrain::data {
namespace {

// classes_per_rank 0: the classes split evenly over the holders (DiNNO's hetero split), each
// holder exactly its own classes and all of their samples.
TEST(Partition, HeteroWithZeroClassesPerHolderGivesEachNodeExactlyItsClasses) {
  const auto labels = torch::arange(1000, torch::kLong).remainder(10);
  PartitionOptions o;
  o.scheme = "hetero";
  o.classes_per_rank = 0;
  for (int nodes : {10, 5, 2}) {
    const auto shards = partition_all(nodes, o, labels, 3);
    const int per = 10 / nodes;
    for (int i = 0; i < nodes; ++i) {
      const auto held = std::get<0>(at::_unique(labels.index_select(0, shards[i].indices), /*sorted=*/true));
      EXPECT_TRUE(torch::equal(held, torch::arange(i * per, (i + 1) * per, torch::kLong)))
          << nodes << " nodes";
      EXPECT_EQ(shards[i].size(), 100 * per);
    }
  }
  try {
    partition_all(12, o, labels, 3);
    FAIL() << "12 nodes over 10 classes";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("12 ranks or graph nodes but 10 classes"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::data
