// Tokenized labelled sentences; see SentenceDataset.h.
#include "dtrain/data/SentenceDataset.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include "dtrain/data/SentenceFile.h"
#include "dtrain/data/TokenCache.h"
#include "dtrain/util/Hash.h"

namespace dtrain::data {

SentenceDataset::SentenceDataset(std::string name, torch::Tensor tokens, torch::Tensor labels,
                                 std::int64_t num_classes, std::int64_t vocab_size, std::int64_t pad_id)
    : name_(std::move(name)),
      tokens_(tokens.contiguous()),
      labels_(labels.contiguous()),
      num_classes_(num_classes),
      vocab_size_(vocab_size),
      pad_id_(pad_id) {
  TORCH_INTERNAL_ASSERT(tokens_.dim() == 2 && tokens_.scalar_type() == torch::kInt);
  TORCH_INTERNAL_ASSERT(labels_.dim() == 1 && labels_.scalar_type() == torch::kLong &&
                        labels_.size(0) == tokens_.size(0));
}

Batch SentenceDataset::get_batch(const torch::Tensor& indices, std::uint64_t /*augment_seed*/) const {
  return Batch{tokens_.index_select(0, indices).to(torch::kLong), labels_.index_select(0, indices)};
}

std::shared_ptr<SentenceDataset> SentenceDataset::head(std::int64_t n) const {
  TORCH_CHECK(n >= 0, name_, ": subset size must be >= 0, found ", n);
  const auto keep = std::min(n, size());
  return std::make_shared<SentenceDataset>(name_, tokens_.narrow(0, 0, keep), labels_.narrow(0, 0, keep),
                                           num_classes_, vocab_size_, pad_id_);
}

namespace {

std::uint64_t settings_hash(config::SentenceFormat format, const std::vector<std::string>& labels) {
  util::Fnv1a64 hash;
  hash.add(config::kSentenceFormatNames.name(format));
  for (const auto& label : labels) {
    hash.add("\n");
    hash.add(label);
  }
  return hash.value();
}

TokenizedSentences tokenize(const SentenceRows& rows, const Tokenizer& tokenizer, std::int64_t seq_len) {
  const auto n = static_cast<std::int64_t>(rows.sentences.size());
  TokenizedSentences out;
  out.tokens = torch::empty({n, seq_len}, torch::kInt);
  out.labels = torch::tensor(rows.labels, torch::kLong);
  auto* p = out.tokens.data_ptr<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i)
    tokenizer.encode(rows.sentences[static_cast<std::size_t>(i)], seq_len, p + i * seq_len);
  return out;
}

// train.<ext> and dev.<ext> under root, for the first extension that has a train file.
std::pair<std::string, std::string> split_files(const std::string& root) {
  TORCH_CHECK(
      !root.empty(),
      "data.root: empty; dataset sentences reads train.tsv and dev.tsv (or train.jsonl and dev.jsonl) "
      "from the folder data.root names (GLUE's CoLA folder)");
  for (const char* ext : {".tsv", ".jsonl"}) {
    const auto train = (std::filesystem::path(root) / (std::string("train") + ext)).string();
    if (!std::filesystem::is_regular_file(train)) continue;
    const auto dev = (std::filesystem::path(root) / (std::string("dev") + ext)).string();
    TORCH_CHECK(std::filesystem::is_regular_file(dev), "data.root: ", root, " has ", train, " but no ", dev,
                "; the dev split is evaluated");
    return {train, dev};
  }
  TORCH_CHECK(false, "data.root: no train.tsv or train.jsonl in ", root,
              "; point data.root at a folder with train.tsv and dev.tsv (GLUE's CoLA or SST-2 folder)");
  return {};
}

// Enough of a file to tell its layout: its first line, or as much as a line may hold.
std::string first_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, path, ": cannot open for reading");
  std::string line(kMaxSentenceLineBytes + 1, '\0');
  in.read(line.data(), static_cast<std::streamsize>(line.size()));
  line.resize(static_cast<std::size_t>(in.gcount()));
  return line;
}

}  // namespace

std::vector<std::string> sentence_labels(const config::DataConfig& data) {
  return data.labels.empty() ? std::vector<std::string>{"0", "1"} : data.labels;
}

SentenceSplit load_sentence_split(const std::string& path, const std::string& name,
                                  const Tokenizer& tokenizer, config::SentenceFormat format,
                                  const std::vector<std::string>& labels, int seq_len) {
  TORCH_CHECK(seq_len >= 3, "data.seq_len: expected >= 3 for [CLS], a piece and [SEP], found ", seq_len);
  const auto contents = read_sentence_file(path);
  TokenCacheKey key;
  key.model_hash = tokenizer.model_hash();
  util::Fnv1a64 data_hash;
  data_hash.add(contents);
  key.data_hash = data_hash.value();
  key.settings_hash = settings_hash(format, labels);
  key.seq_len = seq_len;
  const auto cache = token_cache_path(path);
  SentenceSplit split;
  auto sentences = read_token_cache(cache, key);
  if (sentences) {
    split.from_cache = true;
  } else {
    const auto start = std::chrono::steady_clock::now();
    sentences = tokenize(parse_sentences(path, contents, format, &labels), tokenizer, seq_len);
    split.tokenize_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    write_token_cache(cache, key, *sentences);
  }
  split.set = std::make_shared<SentenceDataset>(name, sentences->tokens, sentences->labels,
                                                static_cast<std::int64_t>(labels.size()),
                                                tokenizer.vocab_size(), tokenizer.pad_id());
  return split;
}

SentenceSplits load_sentences(const config::DataConfig& data) {
  const auto [train_path, dev_path] = split_files(data.root);
  const Tokenizer tokenizer(data.tokenizer);
  auto format = data.sentence_format;
  if (format == config::SentenceFormat::Auto)
    format = detect_sentence_format(train_path, first_line(train_path));
  SentenceSplits out;
  out.class_names = sentence_labels(data);
  TORCH_CHECK(out.class_names.size() >= 2, "data.labels: a classifier needs at least two labels, found ",
              out.class_names.size());
  for (std::size_t i = 0; i < out.class_names.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      TORCH_CHECK(out.class_names[i] != out.class_names[j], "data.labels: '", out.class_names[i],
                  "' is listed twice; each label names one class");
    }
  }
  out.train =
      load_sentence_split(train_path, "sentences/train", tokenizer, format, out.class_names, data.seq_len);
  out.test = load_sentence_split(dev_path, "sentences/dev", tokenizer, format, out.class_names, data.seq_len);
  return out;
}

}  // namespace dtrain::data
