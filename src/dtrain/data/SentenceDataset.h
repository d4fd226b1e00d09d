// Labelled sentences for a classifier over tokens (GLUE's CoLA and SST-2, or one's own): each sentence
// encoded once as ALBERT encodes it, [CLS] pieces [SEP] padded to data.seq_len, held as one
// (N, seq_len) tensor and batched with index_select. The model reads the pad id from the data set
// (models::InputSpec::pad_id) and leaves padding out of attention.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Dataset.h"
#include "dtrain/data/Tokenizer.h"

namespace dtrain::data {

class SentenceDataset : public Dataset {
 public:
  // tokens (N, T) int32 ids below vocab_size; labels (N) int64 in [0, num_classes).
  SentenceDataset(std::string name, torch::Tensor tokens, torch::Tensor labels, std::int64_t num_classes,
                  std::int64_t vocab_size, std::int64_t pad_id);

  const std::string& name() const override { return name_; }
  std::int64_t size() const override { return tokens_.size(0); }
  std::vector<std::int64_t> input_shape() const override { return {tokens_.size(1)}; }
  bool tokens() const override { return true; }
  bool per_sample_labels() const override { return true; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::int64_t pad_id() const override { return pad_id_; }
  std::int64_t num_classes() const override { return num_classes_; }
  const torch::Tensor& labels() const override { return labels_; }
  ChannelStats stats() const override { return {}; }
  // inputs (B, T) int64 token ids, targets (B) int64 labels.
  Batch get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const override;

  const torch::Tensor& token_ids() const { return tokens_; }
  // The first n sentences (sharing storage).
  std::shared_ptr<SentenceDataset> head(std::int64_t n) const;

 private:
  std::string name_;
  torch::Tensor tokens_;  // (N, T) int32
  torch::Tensor labels_;  // (N) int64
  std::int64_t num_classes_;
  std::int64_t vocab_size_;
  std::int64_t pad_id_;
};

// How one split file was read.
struct SentenceSplit {
  std::shared_ptr<SentenceDataset> set;
  bool from_cache = false;        // its token cache was valid and read instead of the text
  double tokenize_seconds = 0.0;  // parsing and tokenizing (0 when from the cache)
};

// One split file: its cache (TokenCache.h) when that was made from these bytes by this tokenizer and
// these settings, else parsed (SentenceFile.h), tokenized and cached. `format` is resolved (not auto).
SentenceSplit load_sentence_split(const std::string& path, const std::string& name,
                                  const Tokenizer& tokenizer, config::SentenceFormat format,
                                  const std::vector<std::string>& labels, int seq_len);

struct SentenceSplits {
  SentenceSplit train;
  SentenceSplit test;
  std::vector<std::string> class_names;  // the label set, class 0 first
};

// data.root's train.tsv and dev.tsv (or train.jsonl and dev.jsonl), in data.sentence_format (auto: as
// the train file reads), tokenized by data.tokenizer to data.seq_len, labels from data.labels.
SentenceSplits load_sentences(const config::DataConfig& data);

// data.labels, or 0 and 1 when it is empty.
std::vector<std::string> sentence_labels(const config::DataConfig& data);

}  // namespace dtrain::data
