// A synthetic classification set for tests and benchmarks: every class has a fixed random
// prototype image and a sample is its class prototype plus Gaussian noise, so models can learn it
// and the whole set is a pure function of (shape, classes, size, seed).
#pragma once

#include "dtrain/data/Dataset.h"
#include "dtrain/data/SentenceDataset.h"

#include <cstdint>
#include <vector>

namespace dtrain::data {

struct SyntheticOptions {
  std::vector<std::int64_t> shape{1, 28, 28};  // (C, H, W)
  std::int64_t classes = 10;
  std::int64_t size = 1024;
  double noise = 1.0;        // standard deviation of the noise around each prototype
  std::uint64_t seed = 0;    // prototypes come from this seed alone, so train and test share them
  std::uint64_t stream = 0;  // which draw of samples: different streams give disjoint noise
};

ImageDataset make_synthetic(const SyntheticOptions& options, const std::string& name = "synthetic");

// Token sequences of options.shape [T] with ids in [1, vocab) and 0 as padding, for sequence
// classifiers: every class has a fixed random prototype sequence; a sample is its class prototype with
// each token replaced by a random one with probability 0.3, cut to a random length of T/2 to T tokens
// and padded with 0 after it (so the padding mask matters). Held as labelled sentences are, pad id 0.
SentenceDataset make_synthetic_tokens(const SyntheticOptions& options, std::int64_t vocab,
                                      const std::string& name = "synthetic");

}  // namespace dtrain::data
