// The collective part of dAD and rank-dAD: after backward, every rank shares, for each tapped
// Linear layer, either its rows of X and Δ (dAD) or a low-rank factorisation of its Δᵀ X (rank-dAD),
// in one all-gather for all layers, and rebuilds the mean weight gradient over ranks from what
// it received (Note [dAD's mean over ranks]).
#pragma once

#include <ATen/core/Generator.h>

#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/parallel/dad/LinearTaps.h"
#include "dtrain/parallel/dad/LowRank.h"

namespace dtrain::parallel {

// How one Linear layer's weight gradient travels.
enum class LayerMethod {
  Gradient,  // the gradient itself, all-reduced in data_parallel's buckets
  Dad,       // X and Δ all-gathered: exact, N*(d_in + d_out) values per rank
  RankDad,   // rank-r factors of Δᵀ X all-gathered: r*(d_in + d_out) values per rank
};
std::string to_string(LayerMethod method);

struct ExchangeLayer {
  LinearTaps::Layer* tap = nullptr;
  LayerMethod method = LayerMethod::Dad;  // Dad or RankDad
};

struct ExchangeTiming {
  double communication = 0.0;  // blocked in the two all-gathers
  double compute = 0.0;        // factorising, packing and rebuilding gradients (part of the update)
  double mean_rank = 0.0;      // rank-dAD layers: the agreed rank, averaged over layers
};

// Collective: every rank passes the same layers with the same methods in the same order, after a
// backward that reached every tapped call. Overwrites each layer's weight gradient with the mean
// over ranks of Δ_rᵀ X_r (exactly for dAD, through the agreed rank for rank-dAD) and, for dAD
// layers, the bias gradient with the mean of Σ_rows Δ_r (rank-dAD layers' biases are all-reduced
// in the buckets). `generator` draws the power iterations' start vectors.
ExchangeTiming exchange_and_rebuild(comm::Communicator* comm, const std::vector<ExchangeLayer>& layers,
                                    const PowerIterationOptions& power, at::Generator generator);

}  // namespace dtrain::parallel
