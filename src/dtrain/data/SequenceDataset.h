// A sequence classification set held in memory: (N, T) int64 token ids, padded with a pad id, and
// one class per sequence; batched with index_select, as the image sets are.
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>

namespace dtrain::data {

class SequenceDataset : public Dataset {
 public:
  // ids (N, T) int64 in [0, vocab_size); labels (N) int64 in [0, num_classes).
  SequenceDataset(std::string name, torch::Tensor ids, torch::Tensor labels, std::int64_t vocab_size,
                  std::int64_t num_classes);

  const std::string& name() const override { return name_; }
  std::int64_t size() const override { return ids_.size(0); }
  std::vector<std::int64_t> input_shape() const override { return {ids_.size(1)}; }
  bool tokens() const override { return true; }
  std::int64_t num_classes() const override { return num_classes_; }
  bool per_sample_labels() const override { return true; }
  std::int64_t vocab_size() const override { return vocab_size_; }
  std::int64_t pad_id() const override { return 0; }
  const torch::Tensor& labels() const override { return labels_; }
  ChannelStats stats() const override { return {}; }
  // inputs (B, T) int64 ids, targets (B) int64 classes; no augmentation.
  Batch get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const override;

  const torch::Tensor& ids() const { return ids_; }

 private:
  std::string name_;
  torch::Tensor ids_;     // (N, T) int64
  torch::Tensor labels_;  // (N) int64
  std::int64_t vocab_size_;
  std::int64_t num_classes_;
};

}  // namespace dtrain::data
