// Metrics against hand-computed values, and the cross-rank reduction against one accumulator.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

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

// Expected values: scikit-learn's matthews_corrcoef formula worked by hand. With t_k how often class k
// is the target, p_k how often it is predicted, c the correct predictions and s the samples,
// MCC = (c s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t)), 0 when the denominator is.
TEST(Metrics, MatthewsCorrelationMatchesScikitLearnsFormula) {
  const auto mcc = [](std::vector<std::int64_t> targets, std::vector<std::int64_t> predictions, int classes) {
    MetricsAccumulator acc(classes);
    auto logits = torch::zeros({static_cast<std::int64_t>(predictions.size()), classes});
    for (std::size_t i = 0; i < predictions.size(); ++i)
      logits[static_cast<std::int64_t>(i)][predictions[i]] = 1.0;
    acc.add(logits, torch::tensor(targets, torch::kLong), 0.0);
    return acc.result().mcc;
  };
  // TP 3, TN 3, FP 1, FN 1: (9 - 1) / sqrt(4 * 4 * 4 * 4) = 0.5.
  EXPECT_NEAR(mcc({1, 1, 1, 0, 0, 0, 1, 0}, {1, 0, 1, 0, 0, 1, 1, 0}, 2), 0.5, 1e-12);
  // TN 3, FP 1, TP 4, FN 2: (12 - 2) / sqrt(5 * 6 * 4 * 5) = 10 / sqrt(600).
  EXPECT_NEAR(mcc({0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, {0, 0, 0, 1, 1, 1, 1, 1, 0, 0}, 2), 0.408248290463863,
              1e-12);
  EXPECT_NEAR(mcc({0, 1, 0, 1}, {1, 0, 1, 0}, 2), -1.0, 1e-12);
  EXPECT_NEAR(mcc({0, 1, 0, 1}, {0, 1, 0, 1}, 2), 1.0, 1e-12);
  EXPECT_EQ(mcc({0, 1, 0, 1}, {1, 1, 1, 1}, 2), 0.0);  // one class predicted: no correlation
  // Three classes, targets 0 0 1 2, predictions 0 1 1 1: t = (2, 1, 1), p = (1, 3, 0), c = 2, s = 4:
  // (8 - 5) / sqrt((16 - 10) (16 - 6)) = 3 / sqrt(60).
  EXPECT_NEAR(mcc({0, 0, 1, 2}, {0, 1, 1, 1}, 3), 0.3872983346207417, 1e-12);
}

TEST(Metrics, MatthewsCorrelationIsNamedBesideF1AndPerClassF1IsKept) {
  MetricsAccumulator acc(3);
  acc.add(logits_ranking({{0, 1, 2}, {1, 0, 2}, {1, 2, 0}, {1, 0, 2}}, 3),
          torch::tensor({0, 0, 1, 2}, torch::kLong), 2.0);
  const auto m = acc.result();
  const auto named = m.named("val/");
  ASSERT_TRUE(named.count("val/mcc"));
  EXPECT_NEAR(named.at("val/mcc"), 0.3872983346207417, 1e-12);
  ASSERT_EQ(m.class_f1.size(), 3u);
  EXPECT_NEAR(m.class_f1[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(m.class_f1[1], 0.5, 1e-12);
  EXPECT_EQ(m.class_f1[2], 0.0);
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

// A language model's perplexity is exp of its mean token loss; a classifier reports none.
TEST(Metrics, ALanguageModelReportsPerplexity) {
  MetricsAccumulator lm(4, /*language_model=*/true), classifier(4);
  const auto logits = torch::zeros({2, 3, 4});
  const auto targets = torch::tensor({{2, 2, 1}, {2, 0, 2}}, torch::kLong);
  lm.add(logits, targets, 6 * 1.5);
  classifier.add(logits, targets, 6 * 1.5);
  ASSERT_TRUE(lm.result().perplexity.has_value());
  EXPECT_DOUBLE_EQ(*lm.result().perplexity, std::exp(1.5));
  EXPECT_DOUBLE_EQ(lm.result().named("val/").at("val/perplexity"), std::exp(1.5));
  EXPECT_FALSE(classifier.result().perplexity.has_value());
  EXPECT_EQ(classifier.result().named("").count("perplexity"), 0u);
}

// A word-level vocabulary's confusion matrix would not fit (33,278 words: 8.9 GB): beyond
// kMaxConfusionClasses only the loss and top-k are kept, and the class figures are not reported.
TEST(Metrics, BeyondTheConfusionLimitOnlyLossAndTopKAreKept) {
  const auto classes = kMaxConfusionClasses + 1;
  MetricsAccumulator acc(classes, /*language_model=*/true);
  auto logits = torch::zeros({3, classes});
  logits.index_put_({torch::indexing::Slice(), 7}, 1.0);
  acc.add(logits, torch::tensor({7, 7, 1}, torch::kLong), 3.0);
  EXPECT_EQ(acc.packed().numel(), 7);
  const auto m = acc.result();
  EXPECT_FALSE(m.class_metrics);
  EXPECT_DOUBLE_EQ(m.top1, 2.0 / 3);
  EXPECT_TRUE(m.class_samples.empty());
  const auto named = m.named("");
  EXPECT_EQ(named.count("mcc") + named.count("f1") + named.count("precision") + named.count("recall"), 0u);
  EXPECT_EQ(named.count("top5"), 1u);
  MetricsAccumulator again(classes, true);
  again.load(acc.packed());
  EXPECT_DOUBLE_EQ(again.result().top1, 2.0 / 3);
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
