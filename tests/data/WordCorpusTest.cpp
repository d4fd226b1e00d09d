// WikiText's word-level corpus (data.dataset: wikitext): the bundled sample read as PyTorch's
// word_language_model reads it (words split at white space, "<eos>" after every line, ids in order
// of first appearance), test words outside the vocabulary as <unk>, windows whose targets are the
// next words; a missing file, a short file and an unknown word without <unk> refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "dtrain/data/Factory.h"
#include "dtrain/data/TextDataset.h"
#include "support/ScratchDir.h"

namespace dtrain::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

config::DataConfig wikitext_config(const std::string& root, int seq_len = 8) {
  config::DataConfig d;
  d.dataset = "wikitext";
  d.root = root;
  d.seq_len = seq_len;
  return d;
}

std::string error_of(const config::DataConfig& d) {
  try {
    load_datasets(d);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(WordCorpus, ReadsWikiTextsLayoutAsPyTorchsWordLanguageModelDoes) {
  const auto sets = load_datasets(wikitext_config(DTRAIN_WIKITEXT_SAMPLE));
  const auto& train = dynamic_cast<const TextDataset&>(*sets.train);
  const auto& test = dynamic_cast<const TextDataset&>(*sets.test);
  // "<eos>" first, then the training file's words in order: its first line is a blank one.
  EXPECT_EQ(train.vocab().at(0), "<eos>");
  EXPECT_EQ(train.vocab().at(1), "=");
  EXPECT_EQ(train.vocab().at(2), "Ashford");
  EXPECT_EQ(train.vocab_size(), static_cast<std::int64_t>(train.vocab().size()));
  EXPECT_TRUE(train.tokens());
  EXPECT_FALSE(train.per_sample_labels());
  EXPECT_EQ(train.input_shape(), std::vector<std::int64_t>{8});

  // The words of the file, an <eos> per line: 5,090 words in 377 lines.
  std::ifstream in(fs::path(DTRAIN_WIKITEXT_SAMPLE) / "wiki.train.tokens");
  std::int64_t words = 0, lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    std::istringstream split(line);
    for (std::string w; split >> w;) ++words;
  }
  EXPECT_EQ(train.size(), (words + lines - 1) / 8);

  const auto batch = train.get_batch(torch::tensor({0, 1}, torch::kLong), 0);
  EXPECT_EQ(train.decode(batch.inputs[0]), "<eos> = Ashford = <eos> <eos> The council");
  EXPECT_EQ(train.decode(batch.targets[0]), "= Ashford = <eos> <eos> The council was");
  EXPECT_TRUE(torch::equal(batch.inputs[1].narrow(0, 1, 7), batch.targets[1].narrow(0, 0, 7)));

  // The test file's titles are not training words: they read as WikiText's <unk>.
  const auto first = test.decode(test.get_batch(torch::tensor({0}, torch::kLong), 0).inputs[0]);
  EXPECT_EQ(first, "<eos> = <unk> = <eos> <eos> The castle");
}

TEST(WordCorpus, AMissingFileAShortFileAndAnUnknownWordAreRefusedByName) {
  const dtrain::testing::ScratchDir dir;
  EXPECT_THAT(error_of(wikitext_config(dir.path().string())),
              HasSubstr("data.root: " + dir.path().string() + " has no wiki.train.tokens"));

  std::ofstream(dir / "wiki.train.tokens") << "a b c d e f g h i j k\n";
  std::ofstream(dir / "wiki.test.tokens") << "a b\n";
  EXPECT_THAT(error_of(wikitext_config(dir.path().string(), 4)),
              HasSubstr((dir / "wiki.test.tokens").string() + ": too short: 3 words"));

  std::ofstream(dir / "wiki.test.tokens") << "a b c d e f\n g h zebra i\n";
  EXPECT_THAT(
      error_of(wikitext_config(dir.path().string(), 4)),
      HasSubstr((dir / "wiki.test.tokens").string() + ":2: word 'zebra' is not in the training file's "
                                                      "vocabulary, which has no <unk>"));
}

}  // namespace
}  // namespace dtrain::data
