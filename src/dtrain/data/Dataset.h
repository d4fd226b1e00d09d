// What the trainer and the partitions need to know about a data set, and the in-memory image data
// set behind every reader: one (N, C, H, W) tensor plus (N) int64 labels, batched with index_select
// (no per-sample objects), with normalisation and augmentation applied per batch from a seed.
#pragma once

#include "dtrain/data/Batch.h"
#include "dtrain/data/Transforms.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::data {

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual const std::string& name() const = 0;
  virtual std::int64_t size() const = 0;
  // (C, H, W) for images, (T) for token sequences, any shape for a program's own data set.
  virtual std::vector<std::int64_t> input_shape() const = 0;
  // Whether the inputs are token ids (T).
  virtual bool tokens() const { return false; }
  // Whether the targets are one class per sample (a classifier's, the default for images) rather
  // than the next token at every position (a language model's, the default for token inputs).
  virtual bool per_sample_labels() const { return !tokens(); }
  // Token inputs: the size of their vocabulary; a language model's classes are its vocabulary.
  virtual std::int64_t vocab_size() const { return tokens() ? num_classes() : 0; }
  // Token inputs: the id that pads a sequence to input_shape(), which the model leaves out of
  // attention; -1 when sequences are not padded.
  virtual std::int64_t pad_id() const { return -1; }
  // Classes for a classifier, vocabulary size for a language model.
  virtual std::int64_t num_classes() const = 0;
  // (N) int64 class of every sample; what hetero and dirichlet partitions split by.
  virtual const torch::Tensor& labels() const = 0;
  // Per-channel statistics used for normalisation; empty for token data.
  virtual ChannelStats stats() const = 0;
  // The samples at `indices` (B) int64, transformed. Augmentation draws only from `augment_seed`,
  // so the same indices and seed give the same batch on any thread. Safe to call concurrently.
  virtual Batch get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const = 0;
};

struct ImageTransformOptions {
  bool normalize = true;
  int random_crop_padding = 0;  // 0 = no random crop
  bool horizontal_flip = false;
};

class ImageDataset : public Dataset {
 public:
  // images (N, C, H, W) uint8 (pixel values 0..255, scaled to [0, 1]) or float32 (used as is);
  // labels (N) int64 in [0, num_classes). Statistics are computed from these images.
  ImageDataset(std::string name, torch::Tensor images, torch::Tensor labels, std::int64_t num_classes);

  const std::string& name() const override { return name_; }
  std::int64_t size() const override { return images_.size(0); }
  std::vector<std::int64_t> input_shape() const override;
  std::int64_t num_classes() const override { return num_classes_; }
  const torch::Tensor& labels() const override { return labels_; }
  ChannelStats stats() const override { return stats_; }
  Batch get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const override;

  const torch::Tensor& images() const { return images_; }
  const ImageTransformOptions& transform() const { return transform_; }
  void set_transform(const ImageTransformOptions& options);
  // A test set is normalised with its training set's statistics.
  void set_stats(const ChannelStats& stats);
  // The first n samples (sharing storage), with the same statistics and transform.
  ImageDataset head(std::int64_t n) const;

 private:
  std::string name_;
  torch::Tensor images_;  // (N, C, H, W)
  torch::Tensor labels_;  // (N) int64
  std::int64_t num_classes_;
  ChannelStats stats_;
  ImageTransformOptions transform_;
};

}  // namespace dtrain::data
