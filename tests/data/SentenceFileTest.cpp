// Sentence rows: GLUE's CoLA and SST-2 layouts, text<TAB>label and JSON lines, the layout found from
// the file, and every malformed row refused in one line naming the file and the line.
#include <iterator>

#include "SentenceTestUtil.h"

namespace dtrain::data {
namespace {

using config::SentenceFormat;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const std::vector<std::string> kBinary{"0", "1"};

SentenceRows parse(const std::string& text, SentenceFormat format,
                   const std::vector<std::string>* labels = &kBinary) {
  return parse_sentences("cola/train.tsv", text, format, labels);
}

// The one-line message parsing `text` throws.
std::string refusal(const std::string& text, SentenceFormat format,
                    const std::vector<std::string>* labels = &kBinary) {
  try {
    parse(text, format, labels);
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

TEST(SentenceFile, ReadsColasFourColumns) {
  const auto rows =
      parse("gj04\t1\t\tOur friends won't buy this analysis.\nclc95\t0\t*\tIn which way is Sandy?\n",
            SentenceFormat::Cola);
  EXPECT_EQ(rows.sentences,
            (std::vector<std::string>{"Our friends won't buy this analysis.", "In which way is Sandy?"}));
  EXPECT_EQ(rows.labels, (std::vector<std::int64_t>{1, 0}));
}

TEST(SentenceFile, ReadsTheBundledSample) {
  const auto path = testing::cola_sample("train.tsv");
  const auto contents = read_sentence_file(path);
  EXPECT_EQ(detect_sentence_format(path, contents), SentenceFormat::Cola);
  const auto rows = parse_sentences(path, contents, SentenceFormat::Cola, &kBinary);
  EXPECT_EQ(rows.sentences.size(), 36u);
  EXPECT_EQ(rows.labels.size(), 36u);
}

TEST(SentenceFile, ReadsSst2sHeaderFormAndPlainTsv) {
  const auto sst2 =
      parse("sentence\tlabel\nit 's a charming journey .\t1\nbland \t0\n", SentenceFormat::Sst2);
  EXPECT_EQ(sst2.sentences, (std::vector<std::string>{"it 's a charming journey .", "bland "}));
  EXPECT_EQ(sst2.labels, (std::vector<std::int64_t>{1, 0}));
  const std::vector<std::string> moods{"negative", "positive"};
  const auto tsv = parse("great film\tpositive\r\ndull\tnegative\r\n", SentenceFormat::Tsv, &moods);
  EXPECT_EQ(tsv.sentences, (std::vector<std::string>{"great film", "dull"}));
  EXPECT_EQ(tsv.labels, (std::vector<std::int64_t>{1, 0}));
}

TEST(SentenceFile, ReadsJsonLinesWithNumberOrTextLabels) {
  const auto rows = parse(R"({"text": "Caf\u00e9 au lait.", "label": 1, "idx": 7}
{"label": "0", "text": "Lait au caf\u00e9 the."}
)",
                          SentenceFormat::Jsonl);
  EXPECT_EQ(rows.sentences, (std::vector<std::string>{"Café au lait.", "Lait au café the."}));
  EXPECT_EQ(rows.labels, (std::vector<std::int64_t>{1, 0}));
  EXPECT_THAT(refusal("{\"text\": \"x\"\n", SentenceFormat::Jsonl),
              HasSubstr("cola/train.tsv:1: not a JSON object"));
  EXPECT_THAT(refusal("{\"text\": \"x\", \"label\": 0.5}\n", SentenceFormat::Jsonl),
              HasSubstr("cola/train.tsv:1: the label is 0.5"));
}

TEST(SentenceFile, AnyLabelWhenNoSetIsGiven) {
  const auto rows = parse("a\t1\t\tOne.\nb\t7\t\tTwo.\n", SentenceFormat::Cola, nullptr);
  EXPECT_EQ(rows.labels, (std::vector<std::int64_t>{-1, -1}));
}

TEST(SentenceFile, FindsTheLayoutFromTheFile) {
  EXPECT_EQ(detect_sentence_format("d/train.tsv", "gj04\t1\t\tA sentence.\n"), SentenceFormat::Cola);
  EXPECT_EQ(detect_sentence_format("d/train.tsv", "sentence\tlabel\r\nx\t1\n"), SentenceFormat::Sst2);
  EXPECT_EQ(detect_sentence_format("d/train.tsv", "A sentence.\t1\n"), SentenceFormat::Tsv);
  EXPECT_EQ(detect_sentence_format("d/train.jsonl", "{}"), SentenceFormat::Jsonl);
  EXPECT_THAT([] { detect_sentence_format("d/train.tsv", "a\tb\tc\n"); },
              ThrowsMessage<c10::Error>(HasSubstr("d/train.tsv:1: a first line of 3 tab-separated columns")));
}

TEST(SentenceFile, RefusesAMalformedRowNamingFileAndLine) {
  const std::string good = "gj04\t1\t\tA good row.\n";
  EXPECT_THAT(refusal(good + "gj04 1 A row without tabs.\n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: no tab; a CoLA"));
  EXPECT_THAT(refusal(good + good + "gj04\t1\tA row of three columns.\n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:3: found 3 tab-separated columns, expected 4"));
  EXPECT_THAT(refusal(good + "gj04\t2\t\tA label of 2.\n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: label '2' is not one of 0, 1"));
  const std::vector<std::string> moods{"negative", "positive"};
  EXPECT_THAT(refusal("fine\tpositive\nodd\tneutral\n", SentenceFormat::Tsv, &moods),
              HasSubstr("cola/train.tsv:2: label 'neutral' is not one of negative, positive"));
  EXPECT_THAT(refusal(good + "gj04\t1\t\tCaf\xe9 in Latin-1.\n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: invalid UTF-8 at byte 12"));
  EXPECT_THAT(refusal(good + "gj04\t1\t\tCut short \xe2\x82\n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: invalid UTF-8"));
  EXPECT_THAT(refusal(good + "gj04\t1\t\t\xed\xa0\x80 a surrogate.\n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: invalid UTF-8"));
  EXPECT_THAT(refusal(good + "gj04\t1\t\t  \n", SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: the sentence is empty"));
  EXPECT_THAT(refusal(good + "\n" + good, SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: an empty line"));
  const std::string long_line = "gj04\t1\t\t" + std::string(kMaxSentenceLineBytes, 'a') + "\n";
  EXPECT_THAT(refusal(good + long_line, SentenceFormat::Cola),
              HasSubstr("cola/train.tsv:2: a line of 65544 bytes, more than 65536"));
  EXPECT_THAT(refusal("text\tlabel\nx\t1\n", SentenceFormat::Sst2),
              HasSubstr("cola/train.tsv:1: expected SST-2's header sentence<TAB>label"));
}

}  // namespace
}  // namespace dtrain::data
