// Classification metrics accumulated over batches and reduced across ranks: loss, top-1/3/5
// accuracy and macro precision/recall/F1 (from a confusion matrix, so the reduction is an exact
// sum and the result does not depend on how samples were split over ranks).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain::comm {
class Communicator;
}

namespace dtrain::train {

struct EvalMetrics {
  double loss = 0.0;
  double top1 = 0.0;
  double top3 = 0.0;
  double top5 = 0.0;
  double precision = 0.0;  // macro average over classes that occur (as targets or predictions)
  double recall = 0.0;
  double f1 = 0.0;
  std::int64_t samples = 0;
  // Per class (index = label): how often it was the target, its recall and its precision; what a
  // report lists by class name (results' per_class.csv).
  std::vector<std::int64_t> class_samples;
  std::vector<double> class_recall;
  std::vector<double> class_precision;

  // {"loss": .., "top1": .., ...} with a prefix, e.g. "val/".
  std::map<std::string, double> named(const std::string& prefix) const;
};

class MetricsAccumulator {
 public:
  explicit MetricsAccumulator(std::int64_t num_classes);

  // outputs (N, C) logits or (N, T, C) for sequences; targets (N) or (N, T); loss_sum is the summed
  // (not mean) loss of these predictions.
  void add(const at::Tensor& outputs, const at::Tensor& targets, double loss_sum);

  // Sums every rank's counts (one all-reduce); afterwards result() is the global figure on all ranks.
  void all_reduce(comm::Communicator& comm);

  EvalMetrics result() const;

  // Every count as one float64 tensor (confusion matrix, loss sum, samples, top-k hits), and back:
  // what a checkpoint keeps of an epoch that is not finished. load() expects the same classes.
  at::Tensor packed() const;
  void load(const at::Tensor& packed);

 private:
  std::int64_t num_classes_;
  double loss_sum_ = 0.0;
  std::int64_t samples_ = 0;
  // Hits within the top k for k = 1..5 (int64, 5), kept as a tensor so that adding a batch costs
  // no synchronisation; k beyond the number of classes counts as every class.
  at::Tensor within_top_;
  at::Tensor confusion_;  // (C, C) int64: [target][prediction]
  std::int64_t correct(int k) const;
};

}  // namespace dtrain::train
