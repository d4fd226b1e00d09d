// Language-modelling sets: a stream of token ids cut into non-overlapping windows of seq_len
// tokens, a sample's targets its inputs shifted by one token. Character level from any text file
// (bytes mapped to a vocabulary of the bytes that occur), or word level from WikiText's token files
// (words split at white space, "<eos>" closing each line, as PyTorch's word_language_model example
// reads them).
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>
#include <vector>

namespace dtrain::data {

class TextDataset : public Dataset {
 public:
  // tokens (L) int64 ids in [0, vocab.size()); `vocab` maps id -> its text (a byte, or a word);
  // decode() joins tokens with `separator` ("" for characters, " " for words).
  TextDataset(std::string name, torch::Tensor tokens, std::vector<std::string> vocab, int seq_len,
              std::string separator = "");

  const std::string& name() const override { return name_; }
  std::int64_t size() const override { return size_; }
  std::vector<std::int64_t> input_shape() const override { return {seq_len_}; }
  bool tokens() const override { return true; }
  std::int64_t num_classes() const override { return static_cast<std::int64_t>(vocab_.size()); }
  // Token windows have no class: every sample is class 0, so hetero/dirichlet see one class.
  const torch::Tensor& labels() const override { return labels_; }
  ChannelStats stats() const override { return {}; }
  // inputs (B, T) and targets (B, T) int64; no augmentation.
  Batch get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const override;

  const std::vector<std::string>& vocab() const { return vocab_; }
  std::string decode(const torch::Tensor& ids) const;
  // The first n windows (sharing storage).
  std::shared_ptr<TextDataset> head(std::int64_t n) const;

 private:
  std::string name_;
  torch::Tensor tokens_;  // (L) int64
  std::vector<std::string> vocab_;
  std::string separator_;
  std::int64_t seq_len_;
  std::int64_t size_;
  torch::Tensor labels_;
};

struct TextSplit {
  std::shared_ptr<TextDataset> train;
  std::shared_ptr<TextDataset> test;
};

// The file's first 90% of characters for training, the last 10% for testing, one vocabulary.
TextSplit load_text(const std::string& path, int seq_len);

// WikiText's layout under `root`: wiki.train.tokens for training, wiki.test.tokens for testing
// (wiki.valid.tokens is not read). The vocabulary is the training file's words in order of first
// appearance, plus "<eos>"; a test word outside it becomes "<unk>" where the training file has
// "<unk>" (WikiText's own), and is refused, naming the file, line and word, where it has not.
TextSplit load_word_corpus(const std::string& root, int seq_len);

}  // namespace dtrain::data
