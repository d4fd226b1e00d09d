// See LayerPlan.h.
#include "dtrain/parallel/dad/LayerPlan.h"

#include <c10/util/Exception.h>

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

}  // namespace dtrain::parallel
