// See LayerPlan.h.
#include "dtrain/parallel/dad/LayerPlan.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

namespace dtrain::parallel {

double estimated_bytes(LayerMethod method, const LayerShape& s, int rank, int world, int element_size) {
  const double n = world;
  const double all_reduce = 2.0 * (n - 1) / n;  // of the payload, per rank (ring)
  const double all_gather = n - 1;              // times this rank's share, per rank (ring)
  const double bias = s.bias ? static_cast<double>(s.out_features) : 0.0;
  const double width = static_cast<double>(s.in_features + s.out_features);
  double elements = 0.0;
  switch (method) {
    case LayerMethod::Gradient:
      elements = all_reduce * (static_cast<double>(s.in_features) * s.out_features + bias);
      break;
    case LayerMethod::Dad:  // the bias gradient comes from the gathered Δ
      elements = all_gather * static_cast<double>(s.rows) * width;
      break;
    case LayerMethod::RankDad:
      elements = all_gather * static_cast<double>(rank) * width + all_reduce * bias;
      break;
  }
  return elements * element_size;
}

LayerMethod cheapest(const std::vector<LayerMethod>& allowed, const LayerShape& shape, int rank, int world,
                     int element_size) {
  TORCH_INTERNAL_ASSERT(!allowed.empty());
  LayerMethod best = allowed.front();
  double best_bytes = estimated_bytes(best, shape, rank, world, element_size);
  for (const auto method : allowed) {
    const double bytes = estimated_bytes(method, shape, rank, world, element_size);
    if (bytes < best_bytes) {
      best = method;
      best_bytes = bytes;
    }
  }
  return best;
}

PlanTrial::PlanTrial(std::vector<Plan> plans, std::vector<std::string> names, int rounds)
    : plans_(std::move(plans)),
      names_(std::move(names)),
      rounds_(rounds),
      seconds_(plans_.size()),
      dropped_after_(plans_.size(), 0) {
  TORCH_INTERNAL_ASSERT(!plans_.empty() && plans_.size() == names_.size());
  for (std::size_t p = 0; p < plans_.size(); ++p) active_.push_back(p);
  settled_ = plans_.size() == 1 || rounds_ <= 0;
}

const PlanTrial::Plan& PlanTrial::current() const {
  return settled_ ? plans_[kept_] : plans_[active_[position_]];
}

void PlanTrial::record(double seconds, comm::Communicator& comm) {
  if (settled_) return;
  seconds_[active_[position_]].push_back(seconds);
  if (++position_ < active_.size()) return;
  position_ = 0;
  ++round_;
  end_round(comm);
}

void PlanTrial::end_round(comm::Communicator& comm) {
  const auto count = static_cast<std::int64_t>(plans_.size());
  auto local = torch::zeros({count}, torch::kDouble);
  for (std::size_t p = 0; p < plans_.size(); ++p) {
    auto v = seconds_[p];
    if (v.empty()) continue;
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    local[static_cast<std::int64_t>(p)] = v[v.size() / 2];
  }
  auto slowest = local;
  if (comm.size() > 1) {
    auto all = torch::empty({comm.size() * count}, torch::kDouble);
    comm.allgather(local, all);
    slowest = std::get<0>(all.view({comm.size(), count}).max(0));
  }
  medians_.assign(slowest.data_ptr<double>(), slowest.data_ptr<double>() + count);
  kept_ = *std::min_element(active_.begin(), active_.end(),
                            [&](std::size_t a, std::size_t b) { return medians_[a] < medians_[b]; });
  std::vector<std::size_t> still;
  for (const auto p : active_) {
    if (medians_[p] <= kDropFactor * medians_[kept_]) {
      still.push_back(p);
    } else {
      dropped_after_[p] = round_;
    }
  }
  active_ = std::move(still);
  settled_ = round_ >= rounds_ || active_.size() == 1;
}

std::string PlanTrial::summary() const {
  if (medians_.empty()) return "kept " + names_[kept_] + " (nothing else to try)";
  std::string out;
  for (std::size_t p = 0; p < plans_.size(); ++p) {
    out += fmt::format("{}{} {:.1f} ms", p ? ", " : "", names_[p], 1e3 * medians_[p]);
    if (dropped_after_[p] > 0) out += fmt::format(" (dropped after round {})", dropped_after_[p]);
  }
  return out + "; kept " + names_[kept_];
}

}  // namespace dtrain::parallel
