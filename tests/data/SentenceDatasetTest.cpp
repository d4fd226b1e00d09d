// The sentences data set: train.tsv and dev.tsv tokenized to data.seq_len, through data.dataset as a
// run loads it; the token cache reused, and made again when the data, the model or the settings
// change; the time tokenizing a CoLA-sized training set takes.
#include <chrono>

#include "SentenceTestUtil.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/SentenceDataset.h"
#include "dtrain/data/TokenCache.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

config::DataConfig sentences_config(const std::string& root, int seq_len = 24) {
  config::DataConfig d;
  d.dataset = "sentences";
  d.root = root;
  d.tokenizer = testing::sample_model();
  d.seq_len = seq_len;
  return d;
}

TEST(SentenceDataset, LoadsColasTrainAndDevSplitsAsTokens) {
  TempDir dir;
  testing::copy_sample(dir / "cola");
  const auto sets = load_datasets(sentences_config(dir / "cola"));
  ASSERT_EQ(sets.train->size(), 36);
  ASSERT_EQ(sets.test->size(), 12);
  EXPECT_TRUE(sets.train->tokens());
  EXPECT_TRUE(sets.train->per_sample_labels());
  EXPECT_EQ(sets.train->input_shape(), (std::vector<std::int64_t>{24}));
  EXPECT_EQ(sets.train->num_classes(), 2);
  EXPECT_EQ(sets.train->vocab_size(), 100);
  EXPECT_EQ(sets.train->pad_id(), 0);
  EXPECT_EQ(sets.class_names, (std::vector<std::string>{"0", "1"}));
  const auto batch = sets.train->get_batch(torch::arange(4, torch::kLong), 0);
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<std::int64_t>{4, 24}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kLong);
  EXPECT_EQ(batch.targets.sizes(), (std::vector<std::int64_t>{4}));
  EXPECT_TRUE(batch.inputs.select(1, 0).eq(2).all().item<bool>());  // [CLS] first
  // Row 0 of the sample: "They painted green the fence a bright.", label 0.
  const Tokenizer tokenizer(testing::sample_model());
  std::vector<std::int32_t> expected(24);
  tokenizer.encode("They painted green the fence a bright.", 24, expected.data());
  EXPECT_TRUE(batch.inputs[0].equal(torch::tensor(expected, torch::kInt).to(torch::kLong)));
  EXPECT_EQ(batch.targets[0].item<std::int64_t>(), 0);
  EXPECT_EQ(sets.train->labels().sum().item<std::int64_t>() + sets.test->labels().sum().item<std::int64_t>(),
            24);
}

TEST(SentenceDataset, RefusesAFolderWithoutItsFilesOrAModel) {
  TempDir dir;
  EXPECT_THAT([&] { load_datasets(sentences_config(dir.str())); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("data.root: no train.tsv or train.jsonl in")));
  testing::copy_sample(dir / "cola");
  std::filesystem::remove(dir / "cola/dev.tsv");
  EXPECT_THAT([&] { load_datasets(sentences_config(dir / "cola")); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("but no " + (dir / "cola/dev.tsv"))));
  testing::copy_sample(dir / "cola");
  auto d = sentences_config(dir / "cola");
  d.tokenizer = "";
  EXPECT_THAT([&] { load_datasets(d); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("data.tokenizer: empty")));
  d = sentences_config(dir / "cola");
  d.labels = {"yes", "yes"};
  EXPECT_THAT([&] { load_datasets(d); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("data.labels: 'yes' is listed twice")));
}

TEST(SentenceDataset, ReadsJsonLinesAndSst2WithTheirOwnLabels) {
  TempDir dir;
  std::filesystem::create_directories(dir / "moods");
  testing::write_text(dir / "moods/train.jsonl",
                      "{\"text\": \"The soup tastes better.\", \"label\": \"positive\"}\n"
                      "{\"text\": \"The bridge was built.\", \"label\": \"negative\"}\n");
  testing::write_text(dir / "moods/dev.jsonl",
                      "{\"text\": \"Few students finished.\", \"label\": \"negative\"}\n");
  auto d = sentences_config(dir / "moods");
  d.labels = {"negative", "positive"};
  auto sets = load_datasets(d);
  EXPECT_EQ(sets.class_names, d.labels);
  EXPECT_TRUE(sets.train->labels().equal(torch::tensor({1, 0}, torch::kLong)));
  EXPECT_EQ(sets.test->size(), 1);

  std::filesystem::create_directories(dir / "sst2");
  testing::write_text(dir / "sst2/train.tsv",
                      "sentence\tlabel\nthe soup tastes better \t1\nthe bridge \t0\n");
  testing::write_text(dir / "sst2/dev.tsv", "sentence\tlabel\nfew students \t0\n");
  sets = load_datasets(sentences_config(dir / "sst2"));
  EXPECT_EQ(sets.train->size(), 2);
  EXPECT_TRUE(sets.train->labels().equal(torch::tensor({1, 0}, torch::kLong)));
}

TEST(SentenceDataset, SubsetsTakeTheFirstSentences) {
  TempDir dir;
  testing::copy_sample(dir / "cola");
  auto d = sentences_config(dir / "cola");
  d.subset_size = 10;
  d.test_subset_size = 5;
  const auto sets = load_datasets(d);
  EXPECT_EQ(sets.train->size(), 10);
  EXPECT_EQ(sets.test->size(), 5);
}

SentenceSplit load_train(const std::string& root, const std::string& model, int seq_len = 24) {
  return load_sentence_split((std::filesystem::path(root) / "train.tsv").string(), "train", Tokenizer(model),
                             config::SentenceFormat::Cola, {"0", "1"}, seq_len);
}

TEST(SentenceDataset, TheTokenCacheIsReusedAndMadeAgainWhenDataModelOrLengthChange) {
  TempDir dir;
  testing::copy_sample(dir / "cola");
  const auto root = dir / "cola";
  const auto cache = token_cache_path(root + "/train.tsv");
  const auto first = load_train(root, testing::sample_model());
  EXPECT_FALSE(first.from_cache);
  ASSERT_TRUE(std::filesystem::exists(cache));
  const auto again = load_train(root, testing::sample_model());
  EXPECT_TRUE(again.from_cache);
  EXPECT_TRUE(again.set->token_ids().equal(first.set->token_ids()));
  EXPECT_TRUE(again.set->labels().equal(first.set->labels()));

  // Another model, another length: made again (and each kept as the cache in turn).
  const auto other_model = load_train(root, testing::sample_model(200));
  EXPECT_FALSE(other_model.from_cache);
  EXPECT_FALSE(other_model.set->token_ids().equal(first.set->token_ids()));
  EXPECT_FALSE(load_train(root, testing::sample_model(200), 16).from_cache);
  EXPECT_TRUE(load_train(root, testing::sample_model(200), 16).from_cache);

  // Changed data: one more row.
  std::ofstream(root + "/train.tsv", std::ios::app) << "zz99\t1\t\tA row added later.\n";
  const auto grown = load_train(root, testing::sample_model(200), 16);
  EXPECT_FALSE(grown.from_cache);
  EXPECT_EQ(grown.set->size(), 37);

  // A damaged cache is not read.
  std::filesystem::resize_file(cache, std::filesystem::file_size(cache) - 3);
  EXPECT_FALSE(load_train(root, testing::sample_model(200), 16).from_cache);
  EXPECT_TRUE(load_train(root, testing::sample_model(200), 16).from_cache);
}

TEST(SentenceDataset, TokenizingColasTrainingSetTakesUnderASecond) {
  // 8,551 sentences, as many as CoLA's train.tsv, of the sample's words in CoLA's layout.
  TempDir dir;
  const auto path = testing::cola_sample("train.tsv");
  const auto rows = parse_sentences(path, read_sentence_file(path), config::SentenceFormat::Cola, nullptr);
  std::string text;
  for (int i = 0; i < 8551; ++i) {
    const auto& s = rows.sentences[static_cast<std::size_t>(i) % rows.sentences.size()];
    text += "gen" + std::to_string(i % 7) + "\t" + std::to_string(i % 2) + "\t\t" + s + " Number " +
            std::to_string(i) + ".\n";
  }
  testing::write_text(dir / "train.tsv", text);
  const auto start = std::chrono::steady_clock::now();
  const auto split = load_train(dir.str(), testing::sample_model(), 64);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(split.set->size(), 8551);
  std::cout << "tokenized 8551 sentences in " << split.tokenize_seconds << " s (load with hashing and cache "
            << seconds << " s)\n";
  EXPECT_LT(split.tokenize_seconds, 1.0);
  const auto cached_start = std::chrono::steady_clock::now();
  EXPECT_TRUE(load_train(dir.str(), testing::sample_model(), 64).from_cache);
  std::cout << "from the cache in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - cached_start).count()
            << " s\n";
}

}  // namespace
}  // namespace dtrain::data
