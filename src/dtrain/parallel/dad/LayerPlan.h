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
// plan per allowed method are used for one training step each, in turn, for up to `rounds` rounds
// (A B C A B C, so that a drifting host load falls on all alike). After every round the ranks
// gather each plan's median step; a plan whose slowest rank's median is more than kDropFactor times
// the best one's is dropped, so that a plan ten times slower on a slow link (the gradient at
// 100 Mbit/s) costs one step of the trial, not `rounds`. When the rounds are done, or one plan is
// left, the plan with the shortest slowest-rank median is kept for the rest of the run. Every step
// of the trial is a real training step; with rank-dAD among the plans a few of them are approximate.
class PlanTrial {
 public:
  using Plan = std::vector<LayerMethod>;  // one method per tapped layer
  static constexpr double kDropFactor = 1.5;

  // `plans` without repeats, each tried for at most `rounds` steps.
  PlanTrial(std::vector<Plan> plans, std::vector<std::string> names, int rounds);

  bool settled() const { return settled_; }
  // The plan the next step uses: in turn while trying, then the one kept.
  const Plan& current() const;
  // Records the last step's seconds on this rank. Collective at the end of every round.
  void record(double seconds, comm::Communicator& comm);
  // "all gradient 310.2 ms (dropped after round 1), all dad 52.0 ms, ...; kept all dad".
  std::string summary() const;

 private:
  void end_round(comm::Communicator& comm);

  std::vector<Plan> plans_;
  std::vector<std::string> names_;
  int rounds_;
  std::vector<std::vector<double>> seconds_;  // per plan
  std::vector<std::size_t> active_;           // the plans still tried, in turn
  std::size_t position_ = 0;                  // in active_, this round
  int round_ = 0;                             // rounds completed
  std::vector<int> dropped_after_;            // per plan: the round it was dropped after, 0 if never
  bool settled_ = false;
  std::size_t kept_ = 0;
  std::vector<double> medians_;  // slowest rank's, per plan, as of the last round
};

}  // namespace dtrain::parallel
