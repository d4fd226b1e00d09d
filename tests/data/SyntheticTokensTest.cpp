// The synthetic sequence classification set (data.synthetic_vocab > 0): token ids in range, padding
// (0) only after each sequence's tokens, one class per sequence, the same set on every rank.
#include "DataTestUtil.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/SentenceDataset.h"

using namespace dtrain::data;
using dtrain::config::DataConfig;

namespace {

DataConfig token_config() {
  DataConfig c;
  c.dataset = "synthetic";
  c.synthetic_vocab = 30;
  c.synthetic_shape = {12};
  c.synthetic_classes = 3;
  c.synthetic_size = 90;
  return c;
}

TEST(SyntheticTokens, SequencesOfIdsPaddedAtTheEndWithOneClassEach) {
  const auto sets = load_datasets(token_config());
  const auto& train = dynamic_cast<const SentenceDataset&>(*sets.train);
  EXPECT_TRUE(train.tokens());
  EXPECT_TRUE(train.per_sample_labels());
  EXPECT_EQ(train.pad_id(), 0);
  EXPECT_EQ(train.vocab_size(), 30);
  EXPECT_EQ(train.num_classes(), 3);
  EXPECT_EQ(train.size(), 90);
  EXPECT_EQ(sets.test->size(), 18);
  EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{12}));
  const auto ids = train.token_ids().to(torch::kLong);
  EXPECT_GE(ids.min().item<std::int64_t>(), 0);
  EXPECT_LT(ids.max().item<std::int64_t>(), 30);
  // Padding only after the tokens, and at least half of every sequence is tokens.
  const auto pad = ids.eq(0).to(torch::kLong);
  EXPECT_TRUE(torch::equal(pad, std::get<0>(pad.cummax(1))));
  EXPECT_GE(pad.sum(1).max().item<std::int64_t>(), 1) << "no sequence is padded";
  EXPECT_LE(pad.sum(1).max().item<std::int64_t>(), 6);
  const auto batch = train.get_batch(torch::tensor({0, 5}, torch::kLong), 0);
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<std::int64_t>{2, 12}));
  EXPECT_EQ(batch.targets.sizes(), (std::vector<std::int64_t>{2}));
  EXPECT_TRUE(torch::equal(ids, dynamic_cast<const SentenceDataset&>(*load_datasets(token_config()).train)
                                    .token_ids()
                                    .to(torch::kLong)));
}

TEST(SyntheticTokens, SequencesOfAClassShareItsPrototype) {
  const auto sets = load_datasets(token_config());
  const auto& train = dynamic_cast<const SentenceDataset&>(*sets.train);
  const auto ids = train.token_ids().narrow(1, 0, 6);  // never padding
  const auto of_class = [&](std::int64_t c) {
    return ids.index_select(0, train.labels().eq(c).nonzero().view(-1));
  };
  const auto first = of_class(0)[0];
  // 70% of tokens are the prototype's: two samples of a class agree on about half of them.
  const auto same = of_class(0).narrow(0, 1, 29).eq(first).to(torch::kDouble).mean().item<double>();
  const auto other = of_class(1).eq(first).to(torch::kDouble).mean().item<double>();
  EXPECT_GT(same, 0.3);
  EXPECT_LT(other, 0.15);
}

TEST(SyntheticTokens, ImageShapesAreRefusedByName) {
  auto c = token_config();
  c.synthetic_shape = {1, 4, 4};
  try {
    load_datasets(c);
    FAIL() << "loaded token sequences of an image shape";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.synthetic_shape"), std::string::npos) << e.what();
  }
}

}  // namespace
