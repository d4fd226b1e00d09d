// The join schedule; see JoinSchedule.h and parallel: Note [Join].
#include "dtrain/train/JoinSchedule.h"

#include <algorithm>
#include <stdexcept>

namespace dtrain::train {

JoinSchedule::JoinSchedule(std::vector<std::int64_t> rank_sizes, std::int64_t batch_size, bool drop_last,
                           std::int64_t first_step)
    : rank_sizes_(std::move(rank_sizes)),
      batch_size_(batch_size),
      drop_last_(drop_last),
      first_step_(first_step) {
  if (rank_sizes_.empty() || batch_size_ < 1) {
    throw std::invalid_argument("JoinSchedule: needs at least one rank and a batch size of at least 1");
  }
}

std::int64_t JoinSchedule::batches(int rank) const {
  const std::int64_t n = rank_sizes_.at(static_cast<std::size_t>(rank));
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::int64_t JoinSchedule::steps_per_epoch() const {
  std::int64_t most = 0;
  for (int r = 0; r < world(); ++r) most = std::max(most, batches(r));
  return first_step_ + most;
}

std::int64_t JoinSchedule::samples(int rank, std::int64_t step) const {
  step -= first_step_;
  if (step < 0 || step >= batches(rank)) return 0;
  return std::min(batch_size_, rank_sizes_[static_cast<std::size_t>(rank)] - step * batch_size_);
}

std::int64_t JoinSchedule::samples(std::int64_t step) const {
  std::int64_t total = 0;
  for (int r = 0; r < world(); ++r) total += samples(r, step);
  return total;
}

double JoinSchedule::weight(int rank, std::int64_t step) const {
  const auto total = samples(step);
  if (total == 0) return 0.0;
  return static_cast<double>(world()) * static_cast<double>(samples(rank, step)) / static_cast<double>(total);
}

}  // namespace dtrain::train
