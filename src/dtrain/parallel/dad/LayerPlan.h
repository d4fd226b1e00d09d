// parallel.dad.auto: for each Linear layer, send whichever costs fewest bytes on the wire — its
// gradient through data_parallel's buckets, dAD's rows, or rank-dAD's factors — so that dAD never
// loses to plain all-reduce the way it did on the authors' vision transformer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/parallel/dad/DadExchange.h"

namespace dtrain::parallel {

struct LayerShape {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  std::int64_t rows = 0;  // per rank and step (batch x positions); the largest over ranks
  bool bias = true;
};

// Bytes one rank sends per step for one layer under `method`, with `world` ranks, rank-dAD at
// `rank` components, elements of `element_size` bytes: ring all-reduce of the gradient
// (2 (S-1)/S of it), ring all-gather of dAD's rows or rank-dAD's factors ((S-1) times this rank's
// share), rank-dAD's bias in the buckets.
double estimated_bytes(LayerMethod method, const LayerShape& shape, int rank, int world, int element_size);

// The cheapest of `allowed` (ties go to the earlier entry: list the exact methods first).
LayerMethod cheapest(const std::vector<LayerMethod>& allowed, const LayerShape& shape, int rank, int world,
                     int element_size);

}  // namespace dtrain::parallel
