// Metrics against hand-computed values, and the cross-rank reduction against one accumulator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/train/Metrics.h"
#include "support/ThreadWorld.h"

namespace dtrain::train {
namespace {

// Logits whose ranking is `order` (best first) for each row.
torch::Tensor logits_ranking(const std::vector<std::vector<int>>& order, int classes) {
  auto out = torch::zeros({static_cast<int64_t>(order.size()), classes});
  for (size_t i = 0; i < order.size(); ++i) {
    for (size_t j = 0; j < order[i].size(); ++j) out[i][order[i][j]] = static_cast<float>(classes - j);
  }
  return out;
}

TEST(Metrics, MacroPrecisionRecallF1MatchHandComputedValues) {
  // targets 0 0 1 2, predictions 0 1 1 1.
  MetricsAccumulator acc(3);
  auto logits = logits_ranking({{0, 1, 2}, {1, 0, 2}, {1, 2, 0}, {1, 0, 2}}, 3);
  acc.add(logits, torch::tensor({0, 0, 1, 2}, torch::kLong), 2.0);
  const auto m = acc.result();
  EXPECT_EQ(m.samples, 4);
  EXPECT_DOUBLE_EQ(m.loss, 0.5);
  EXPECT_DOUBLE_EQ(m.top1, 0.5);
  EXPECT_DOUBLE_EQ(m.top3, 1.0);
  EXPECT_NEAR(m.precision, (1.0 + 1.0 / 3 + 0.0) / 3, 1e-12);
  EXPECT_NEAR(m.recall, (0.5 + 1.0 + 0.0) / 3, 1e-12);
  EXPECT_NEAR(m.f1, (2.0 / 3 + 0.5 + 0.0) / 3, 1e-12);
}

TEST(Metrics, PerClassFiguresMatchHandComputedValues) {
  // targets 0 0 1 2, predictions 0 1 1 1 (as above): per_class.csv's columns.
  MetricsAccumulator acc(3);
  acc.add(logits_ranking({{0, 1, 2}, {1, 0, 2}, {1, 2, 0}, {1, 0, 2}}, 3),
          torch::tensor({0, 0, 1, 2}, torch::kLong), 2.0);
  const auto m = acc.result();
  EXPECT_EQ(m.class_samples, (std::vector<std::int64_t>{2, 1, 1}));
  EXPECT_EQ(m.class_recall, (std::vector<double>{0.5, 1.0, 0.0}));
  ASSERT_EQ(m.class_precision.size(), 3u);
  EXPECT_DOUBLE_EQ(m.class_precision[0], 1.0);
  EXPECT_DOUBLE_EQ(m.class_precision[1], 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.class_precision[2], 0.0);
}

TEST(Metrics, TopKCountsATargetAmongTheKBest) {
  MetricsAccumulator acc(6);
  // Target 5 ranked 1st, 2nd, 4th and 6th.
  auto logits =
      logits_ranking({{5, 0, 1, 2, 3, 4}, {0, 5, 1, 2, 3, 4}, {0, 1, 2, 5, 3, 4}, {0, 1, 2, 3, 4, 5}}, 6);
  acc.add(logits, torch::full({4}, 5, torch::kLong), 0.0);
  const auto m = acc.result();
  EXPECT_DOUBLE_EQ(m.top1, 0.25);
  EXPECT_DOUBLE_EQ(m.top3, 0.5);
  EXPECT_DOUBLE_EQ(m.top5, 0.75);
}

TEST(Metrics, SequenceOutputsAreFlattened) {
  MetricsAccumulator acc(4);
  auto logits = torch::zeros({2, 3, 4});
  logits.index_put_({torch::indexing::Slice(), torch::indexing::Slice(), 2}, 1.0);
  auto targets = torch::tensor({{2, 2, 1}, {2, 0, 2}}, torch::kLong);
  acc.add(logits, targets, 0.0);
  EXPECT_EQ(acc.result().samples, 6);
  EXPECT_DOUBLE_EQ(acc.result().top1, 4.0 / 6);
}

TEST(Metrics, AllReduceEqualsOneAccumulatorOverTheUnion) {
  torch::manual_seed(3);
  const auto logits = torch::randn({40, 7});
  const auto targets = torch::randint(0, 7, {40}, torch::kLong);
  MetricsAccumulator whole(7);
  whole.add(logits, targets, 12.0);
  const auto expected = whole.result();
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    MetricsAccumulator part(7);
    const auto r = comm->rank();
    part.add(logits.narrow(0, r * 20, 20), targets.narrow(0, r * 20, 20), 6.0);
    part.all_reduce(*comm);
    const auto m = part.result();
    EXPECT_EQ(m.samples, 40);
    EXPECT_DOUBLE_EQ(m.loss, expected.loss);
    EXPECT_DOUBLE_EQ(m.top1, expected.top1);
    EXPECT_DOUBLE_EQ(m.top5, expected.top5);
    EXPECT_NEAR(m.f1, expected.f1, 1e-12);
    EXPECT_NEAR(m.precision, expected.precision, 1e-12);
  });
}

}  // namespace
}  // namespace dtrain::train
