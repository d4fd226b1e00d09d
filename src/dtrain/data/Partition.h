// Which training samples each rank owns. Every rank computes every rank's share from the same
// labels and seed, so shares are agreed without communication and each rank also knows the sizes
// of the others (what the sampler needs to give all ranks the same number of steps).
//   random     iid: a seeded permutation cut into near-equal contiguous shares
//   hetero     classes per rank: rank r holds classes r*c .. r*c+c-1 (mod C); a class held by
//              several ranks is split between them; classes left over when world*c < C go
//              round-robin, so every sample is owned
//   dirichlet  per class, proportions over ranks drawn from Dirichlet(alpha) (small alpha = skewed)
//   kfold      a seeded permutation cut into K folds; fold k is held out for validation (the same
//              on every rank) and the other K-1 folds are shared out as in random
//   subset     the first N samples (data.subset_size; 0 = all) in file order, rank r taking every
//              world-th one starting at r (torch's unshuffled DistributedSampler)
// All schemes are disjoint; all but subset (with N < size) cover the training set.
#pragma once

#include "dtrain/config/RunConfig.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::data {

struct PartitionOptions {
  std::string scheme = "random";  // random | hetero | dirichlet | kfold | subset
  int classes_per_rank = 2;
  double dirichlet_alpha = 0.5;
  int num_folds = 5;
  int fold = 0;
  std::int64_t subset_size = 0;
};

PartitionOptions partition_options(const config::DataConfig& data);

struct Shard {
  int rank = 0;
  int world = 1;
  torch::Tensor indices;                 // (n_rank) int64, ascending: this rank's training samples
  torch::Tensor held_out;                // kfold: (n_fold) int64 validation samples; otherwise empty
  std::vector<std::int64_t> rank_sizes;  // every rank's share size, rank_sizes[rank] == indices.size(0)

  std::int64_t size() const { return indices.size(0); }
  std::int64_t min_size() const;
  std::int64_t max_size() const;
};

// This rank's share of the samples whose labels are `labels` (N) int64.
Shard partition(int rank, int world, const PartitionOptions& options, const torch::Tensor& labels,
                std::uint64_t seed);
Shard partition(int rank, int world, const config::DataConfig& data, const torch::Tensor& labels,
                std::uint64_t seed);

// Every rank's share, index r for rank r (held_out is the same in all).
std::vector<Shard> partition_all(int world, const PartitionOptions& options, const torch::Tensor& labels,
                                 std::uint64_t seed);

// One rank holding every sample, in order: for evaluation and single-process training.
Shard whole(std::int64_t size);

}  // namespace dtrain::data
