// parallel.dad.auto: for each Linear layer, send whichever costs fewest bytes on the wire — its
// gradient through data_parallel's buckets, dAD's rows, or rank-dAD's factors — so that dAD never
// loses to plain all-reduce the way it did on the authors' vision transformer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
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

// Note [Measuring auto's plans]
// Bytes are not time: over loopback rank-dAD's power iterations cost more than the bytes they
// save. So auto, like cuDNN's benchmark mode, measures: the plan that is cheapest in bytes and one
// plan per allowed method are each used for a few training steps, in turn (A B C A B C, so that a
// drifting host load falls on all alike), and the plan whose slowest rank had the shortest median
// step is kept for the rest of the run. Every step of the trial is a real training step; with
// rank-dAD among the plans a few of them are approximate.
class PlanTrial {
 public:
  using Plan = std::vector<LayerMethod>;  // one method per tapped layer
  // `plans` without repeats; each is used for `steps_each` steps.
  PlanTrial(std::vector<Plan> plans, std::vector<std::string> names, int steps_each);

  bool settled() const { return settled_; }
  // The plan the next step uses: in turn while trying, then the one kept.
  const Plan& current() const;
  // Records the last step's seconds on this rank. Collective once every plan has had its steps:
  // the ranks' medians are gathered and the plan with the shortest slowest-rank median is kept.
  void record(double seconds, comm::Communicator& comm);
  // "dad 26.6 ms, rankdad 45.1 ms, ...; kept dad".
  std::string summary() const;

 private:
  std::vector<Plan> plans_;
  std::vector<std::string> names_;
  int steps_each_;
  std::vector<std::vector<double>> seconds_;  // per plan
  std::size_t step_ = 0;
  bool settled_ = false;
  std::size_t kept_ = 0;
  std::vector<double> medians_;  // slowest rank's, per plan, once settled
};

}  // namespace dtrain::parallel
