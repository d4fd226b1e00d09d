// A character-level language-modelling set from any text file: bytes mapped to a vocabulary of
// the bytes that occur, cut into non-overlapping windows of seq_len tokens; a sample's targets are
// its inputs shifted by one token.
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>

namespace dtrain::data {

class TextDataset : public Dataset {
 public:
  // tokens (L) int64 ids in [0, vocab.size()); `vocab` maps id -> byte.
  TextDataset(std::string name, torch::Tensor tokens, std::string vocab, int seq_len);

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

  const std::string& vocab() const { return vocab_; }
  std::string decode(const torch::Tensor& ids) const;
  // ids of `text`; throws on a byte outside the vocabulary.
  torch::Tensor encode(const std::string& text) const;
  // The first n windows (sharing storage).
  std::shared_ptr<TextDataset> head(std::int64_t n) const;

 private:
  std::string name_;
  torch::Tensor tokens_;  // (L) int64
  std::string vocab_;
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

}  // namespace dtrain::data
