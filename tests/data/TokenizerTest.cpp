// The tokenizer: ALBERT's special pieces at ALBERT's ids, [CLS] pieces [SEP] with padding and
// truncation, round trips, and the same pieces as SentencePiece's Python binding on the same model
// (skipped where python3-sentencepiece is not installed).
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "SentenceTestUtil.h"
#include "dtrain/data/SentencePieceLibrary.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;
using testing::sample_model;
using testing::TempDir;

const std::vector<std::string> kSentences{
    "The baker sold every loaf before noon.", "Which book did you lend to Sam?",
    "A zebra quietly jumped over 12 fences!", "Nobody knows where the keys went."};

TEST(Tokenizer, HasAlbertsSpecialPiecesAtAlbertsIds) {
  const Tokenizer tokenizer(sample_model());
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.unk_id(), 1);
  EXPECT_EQ(tokenizer.cls_id(), 2);
  EXPECT_EQ(tokenizer.sep_id(), 3);
  EXPECT_EQ(tokenizer.piece(0), "<pad>");
  EXPECT_EQ(tokenizer.piece(1), "<unk>");
  EXPECT_EQ(tokenizer.piece(2), "[CLS]");
  EXPECT_EQ(tokenizer.piece(3), "[SEP]");
  EXPECT_EQ(tokenizer.piece(4), "[MASK]");
  EXPECT_EQ(tokenizer.vocab_size(), 100);
}

TEST(Tokenizer, EncodesClsPiecesSepThenPads) {
  const Tokenizer tokenizer(sample_model());
  const auto pieces = tokenizer.pieces("The farmer counted the sheep.");
  ASSERT_FALSE(pieces.empty());
  const std::int64_t seq_len = static_cast<std::int64_t>(pieces.size()) + 6;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(seq_len), -7);
  EXPECT_EQ(tokenizer.encode("The farmer counted the sheep.", seq_len, ids.data()),
            static_cast<std::int64_t>(pieces.size()) + 2);
  std::vector<std::int32_t> expected{2};
  expected.insert(expected.end(), pieces.begin(), pieces.end());
  expected.push_back(3);
  expected.resize(static_cast<std::size_t>(seq_len), 0);
  EXPECT_EQ(ids, expected);
}

TEST(Tokenizer, TruncatesThePiecesAndKeepsSepLast) {
  const Tokenizer tokenizer(sample_model());
  const auto pieces = tokenizer.pieces("The committee has approved the new budget.");
  ASSERT_GT(pieces.size(), 3u);
  std::vector<std::int32_t> ids(5);
  EXPECT_EQ(tokenizer.encode("The committee has approved the new budget.", 5, ids.data()), 5);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{2, pieces[0], pieces[1], pieces[2], 3}));
  EXPECT_THAT([&] { tokenizer.encode("x", 2, ids.data()); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("data.seq_len: expected >= 3")));
}

TEST(Tokenizer, DecodeInvertsEncode) {
  // Sentences of the corpus's characters (others are <unk>, which decodes to " ⁇ ").
  const Tokenizer tokenizer(sample_model(200));
  for (const auto& sentence : {"The baker sold every loaf before noon.", "Which book did you lend to Sam?",
                               "Nobody knows where the keys went.", "The old clock stopped at midnight."}) {
    std::vector<std::int32_t> ids(64);
    tokenizer.encode(sentence, 64, ids.data());
    EXPECT_EQ(tokenizer.decode(ids), sentence);
  }
}

TEST(Tokenizer, TextNeverProducesTheControlPieces) {
  const Tokenizer tokenizer(sample_model());
  // Pieces of text, or <unk> for characters the corpus lacks; never <pad>, [CLS], [SEP] or [MASK].
  for (const auto id : tokenizer.pieces("[CLS] <pad> [SEP] [MASK]")) {
    EXPECT_TRUE(id == tokenizer.unk_id() || id > 4) << tokenizer.piece(id);
  }
}

TEST(Tokenizer, RefusesWhatIsNotAnAlbertModel) {
  TempDir dir;
  EXPECT_THAT([&] { Tokenizer t(dir / "missing.model"); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("data.tokenizer: cannot open")));
  testing::write_text(dir / "junk.model", "not a model");
  EXPECT_THAT([&] { Tokenizer t(dir / "junk.model"); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("is not a SentencePiece model")));
  // SentencePiece's defaults: <unk> <s> </s>, no <pad>, no [CLS].
  const auto error = sentencepiece_library().train({{"model_prefix", dir / "plain"},
                                                    {"vocab_size", "30"},
                                                    {"hard_vocab_limit", "false"},
                                                    {"minloglevel", "2"}},
                                                   {"the cat sat on the mat", "a dog ran in the park"});
  ASSERT_EQ(error, "");
  EXPECT_THAT([&] { Tokenizer t(dir / "plain.model"); },
              ::testing::ThrowsMessage<c10::Error>(HasSubstr("has no piece <pad>")));
}

// What SentencePiece's Python binding gives on `model`: first the ids of <pad>, <unk>, [CLS], [SEP]
// and [MASK], then the ids of each of kSentences; empty when the binding is not installed.
std::vector<std::vector<std::int32_t>> python_ids(const std::string& model, const TempDir& dir) {
  std::ofstream script(dir / "ids.py");
  script << "import sys\n"
            "try:\n"
            "    import sentencepiece as spm\n"
            "except ImportError:\n"
            "    sys.exit(77)\n"
            "sp = spm.SentencePieceProcessor(model_file=sys.argv[1])\n"
            "print(sp.pad_id(), sp.unk_id(), *(sp.piece_to_id(p) for p in ('[CLS]', '[SEP]', '[MASK]')))\n"
            "for line in open(sys.argv[2], encoding='utf-8').read().splitlines():\n"
            "    print(' '.join(map(str, sp.encode(line))))\n";
  script.close();
  std::ofstream input(dir / "sentences.txt");
  for (const auto& s : kSentences) input << s << "\n";
  input.close();
  const auto command = "/usr/bin/python3 " + (dir / "ids.py") + " " + model + " " + (dir / "sentences.txt") +
                       " > " + (dir / "ids.txt") + " 2>/dev/null";
  if (std::system(command.c_str()) != 0) return {};
  std::ifstream out(dir / "ids.txt");
  std::vector<std::vector<std::int32_t>> lines;
  for (std::string line; std::getline(out, line);) {
    std::istringstream words(line);
    lines.emplace_back(std::istream_iterator<std::int32_t>(words), std::istream_iterator<std::int32_t>());
  }
  return lines;
}

TEST(Tokenizer, IdsMatchSentencePiecesPythonBinding) {
  TempDir dir;
  const auto model = sample_model(200);
  const auto reference = python_ids(model, dir);
  if (reference.empty()) GTEST_SKIP() << "no /usr/bin/python3 with sentencepiece (python3-sentencepiece)";
  ASSERT_EQ(reference.size(), kSentences.size() + 1);
  const Tokenizer tokenizer(model);
  EXPECT_EQ(reference[0], (std::vector<std::int32_t>{tokenizer.pad_id(), tokenizer.unk_id(),
                                                     tokenizer.cls_id(), tokenizer.sep_id(), 4}));
  for (std::size_t i = 0; i < kSentences.size(); ++i) {
    EXPECT_EQ(tokenizer.pieces(kSentences[i]), reference[i + 1]) << kSentences[i];
  }
}

}  // namespace
}  // namespace dtrain::data
