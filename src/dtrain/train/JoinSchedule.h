// JoinSchedule: under data.equalize: join, which ranks train at which step of an epoch and how much
// each one's gradient weighs, decided from every rank's share size alone, so that every rank
// computes the same schedule without communicating. See parallel: Note [Join].
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::train {

class JoinSchedule {
 public:
  // rank_sizes: every rank's training samples (data::Shard::rank_sizes); batch_size and drop_last
  // as the sampler draws them (data.batch_size, data.drop_last). `first_step`: the step of the epoch
  // the ranks begin those samples at (the rest of an epoch across a size change, data::RemainderDeal).
  JoinSchedule(std::vector<std::int64_t> rank_sizes, std::int64_t batch_size, bool drop_last,
               std::int64_t first_step = 0);

  int world() const { return static_cast<int>(rank_sizes_.size()); }
  // Batches rank `rank` draws per epoch (from first_step).
  std::int64_t batches(int rank) const;
  // Steps per epoch: first_step and the most batches any rank draws.
  std::int64_t steps_per_epoch() const;
  // Samples of rank `rank` in step `step` of an epoch (0 once it has run out), and of all ranks.
  std::int64_t samples(int rank, std::int64_t step) const;
  std::int64_t samples(std::int64_t step) const;
  // The weight of rank `rank`'s gradient in step `step`: world * its samples / the step's samples
  // (the weights of a step sum to world; a plain all-reduce mean weighs every rank 1).
  double weight(int rank, std::int64_t step) const;

 private:
  std::vector<std::int64_t> rank_sizes_;
  std::int64_t batch_size_;
  bool drop_last_;
  std::int64_t first_step_;
};

}  // namespace dtrain::train
