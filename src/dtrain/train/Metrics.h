// Classification metrics accumulated over batches and reduced across ranks: loss, top-1/3/5
// accuracy, macro precision/recall/F1 and Matthews correlation (from a confusion matrix, so the reduction is
// an exact sum and the result does not depend on how samples were split over ranks).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/util/DeviceScalar.h"

namespace dtrain::comm {
class Communicator;
}

namespace dtrain::train {

// Matthews correlation of a (C, C) confusion matrix, [target][prediction], as scikit-learn's
// matthews_corrcoef computes it for any number of classes.
double matthews_correlation(const at::Tensor& confusion);

struct EvalMetrics {
  double loss = 0.0;
  double top1 = 0.0;
  double top3 = 0.0;
  double top5 = 0.0;
  double precision = 0.0;  // macro average over classes that occur (as targets or predictions)
  double recall = 0.0;
  double f1 = 0.0;
  // Matthews correlation (CoLA's metric) over every class, in [-1, 1]: scikit-learn's
  // matthews_corrcoef of the confusion matrix; 0 when every target or every prediction is one class.
  double mcc = 0.0;
  // Whether precision, recall, F1, Matthews correlation and the per-class figures were computed:
  // not beyond kMaxConfusionClasses classes (a word-level vocabulary), whose confusion matrix would
  // not fit; named() then leaves them out.
  bool class_metrics = true;
  // exp(loss) for a language model (per-token cross-entropy), as PyTorch's word_language_model reports it.
  std::optional<double> perplexity;
  std::int64_t samples = 0;
  // Per class (index = label): how often it was the target, its recall and its precision; what a
  // report lists by class name (results' per_class.csv).
  std::vector<std::int64_t> class_samples;
  std::vector<double> class_recall;
  std::vector<double> class_precision;
  std::vector<double> class_f1;

  // {"loss": .., "top1": .., ...} with a prefix, e.g. "val/".
  std::map<std::string, double> named(const std::string& prefix) const;
};

// The most classes the confusion matrix is kept for ((C, C) int64: 8 MB at 1,024).
constexpr std::int64_t kMaxConfusionClasses = 1024;

class MetricsAccumulator {
 public:
  // `language_model`: the targets are next tokens, and result() reports the perplexity.
  explicit MetricsAccumulator(std::int64_t num_classes, bool language_model = false);

  // outputs (N, C) logits or (N, T, C) for sequences; targets (N) or (N, T); loss_sum is the summed
  // (not mean) loss of these predictions.
  void add(const at::Tensor& outputs, const at::Tensor& targets, double loss_sum);
  // The same with the batch's mean loss as a step reports it: the counts, the loss and the sums
  // stay on the outputs' device, so a step on a GPU adds its batch without waiting for it (Note
  // [Reading a step's figures]); packed() and result() read them.
  void add_mean(const at::Tensor& outputs, const at::Tensor& targets, const util::DeviceScalar& mean_loss);

  // Sums every rank's counts (one all-reduce); afterwards result() is the global figure on all ranks.
  void all_reduce(comm::Communicator& comm);

  EvalMetrics result() const;

  // Every count as one float64 tensor (confusion matrix, loss sum, samples, top-k hits), and back:
  // what a checkpoint keeps of an epoch that is not finished. load() expects the same classes.
  at::Tensor packed() const;
  void load(const at::Tensor& packed);

 private:
  std::int64_t num_classes_;
  bool language_model_;
  std::int64_t samples_ = 0;
  // The summed loss (float64, 1), hits within the top k for k = 1..5 (int64, 5; k beyond the number
  // of classes counts as every class) and the confusion matrix ((C, C) int64: [target][prediction]),
  // as tensors on the device of the outputs added (the CPU until then), so that adding a batch
  // costs no synchronisation. Beyond kMaxConfusionClasses the confusion matrix is empty.
  at::Tensor loss_sum_;
  at::Tensor within_top_;
  at::Tensor confusion_;
  // The counts from outputs on `device`: until a batch is added, the sums move there.
  void count(const at::Tensor& outputs, const at::Tensor& targets);
  void follow(const c10::Device& device);
};

}  // namespace dtrain::train
