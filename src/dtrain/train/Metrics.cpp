#include "dtrain/train/Metrics.h"

#include <torch/torch.h>

#include <algorithm>

#include "dtrain/comm/Communicator.h"

namespace dtrain::train {

std::map<std::string, double> EvalMetrics::named(const std::string& prefix) const {
  return {{prefix + "loss", loss}, {prefix + "top1", top1},           {prefix + "top3", top3},
          {prefix + "top5", top5}, {prefix + "precision", precision}, {prefix + "recall", recall},
          {prefix + "f1", f1}};
}

MetricsAccumulator::MetricsAccumulator(std::int64_t num_classes)
    : num_classes_(num_classes), confusion_(torch::zeros({num_classes, num_classes}, torch::kLong)) {
  TORCH_CHECK(num_classes > 0, "metrics need at least one class, got ", num_classes);
}

void MetricsAccumulator::add(const at::Tensor& outputs, const at::Tensor& targets, double loss_sum) {
  torch::NoGradGuard no_grad;
  const auto logits = outputs.reshape({-1, outputs.size(-1)});
  const auto labels = targets.reshape({-1}).to(torch::kLong);
  TORCH_CHECK(logits.size(0) == labels.size(0), "metrics: ", logits.size(0), " predictions for ",
              labels.size(0), " targets");
  const auto n = labels.size(0);
  if (n == 0) return;
  const std::int64_t ks[3] = {1, 3, 5};
  const auto kmax = std::min<std::int64_t>(5, logits.size(1));
  const auto top = std::get<1>(logits.topk(kmax, /*dim=*/1));  // (n, kmax)
  const auto hits = top.eq(labels.unsqueeze(1));               // (n, kmax)
  for (int i = 0; i < 3; ++i) {
    const auto k = std::min(ks[i], kmax);
    correct_[i] += hits.narrow(1, 0, k).any(1).sum().item<std::int64_t>();
  }
  const auto predicted = top.select(1, 0);
  confusion_.view({-1}).index_add_(0, labels * num_classes_ + predicted, torch::ones({n}, torch::kLong));
  loss_sum_ += loss_sum;
  samples_ += n;
}

void MetricsAccumulator::all_reduce(comm::Communicator& comm) {
  // One message: the confusion matrix, then loss, samples and top-k counts, all as float64 (the
  // counts stay exact below 2^53).
  auto packed =
      torch::cat({confusion_.view({-1}).to(torch::kDouble),
                  torch::tensor({loss_sum_, static_cast<double>(samples_), static_cast<double>(correct_[0]),
                                 static_cast<double>(correct_[1]), static_cast<double>(correct_[2])},
                                torch::kDouble)});
  comm.allreduce(packed, comm::ReduceOp::Sum);
  const auto cells = num_classes_ * num_classes_;
  confusion_ = packed.narrow(0, 0, cells).round().to(torch::kLong).view({num_classes_, num_classes_});
  const auto tail = packed.narrow(0, cells, 5);
  loss_sum_ = tail[0].item<double>();
  samples_ = static_cast<std::int64_t>(tail[1].item<double>());
  for (int i = 0; i < 3; ++i) correct_[i] = static_cast<std::int64_t>(tail[2 + i].item<double>());
}

EvalMetrics MetricsAccumulator::result() const {
  EvalMetrics m;
  m.samples = samples_;
  if (samples_ == 0) return m;
  const double n = static_cast<double>(samples_);
  m.loss = loss_sum_ / n;
  m.top1 = correct_[0] / n;
  m.top3 = correct_[1] / n;
  m.top5 = correct_[2] / n;
  const auto confusion = confusion_.to(torch::kDouble);
  const auto true_positive = confusion.diagonal();
  const auto predicted = confusion.sum(0);  // per class: how often it was predicted
  const auto actual = confusion.sum(1);     // per class: how often it was the target
  const auto present = (predicted + actual).gt(0);
  const auto classes = present.sum().item<double>();
  if (classes == 0) return m;
  const auto precision =
      torch::where(predicted.gt(0), true_positive / predicted.clamp_min(1), torch::zeros_like(predicted));
  const auto recall =
      torch::where(actual.gt(0), true_positive / actual.clamp_min(1), torch::zeros_like(actual));
  const auto denom = precision + recall;
  const auto f1 =
      torch::where(denom.gt(0), 2 * precision * recall / denom.clamp_min(1e-300), torch::zeros_like(denom));
  m.precision = (precision * present).sum().item<double>() / classes;
  m.recall = (recall * present).sum().item<double>() / classes;
  m.f1 = (f1 * present).sum().item<double>() / classes;
  return m;
}

}  // namespace dtrain::train
