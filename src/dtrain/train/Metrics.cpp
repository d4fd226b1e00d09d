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
    : num_classes_(num_classes),
      within_top_(torch::zeros({5}, torch::kLong)),
      confusion_(torch::zeros({num_classes, num_classes}, torch::kLong)) {
  TORCH_CHECK(num_classes > 0, "metrics need at least one class, got ", num_classes);
}

void MetricsAccumulator::add(const at::Tensor& outputs, const at::Tensor& targets, double loss_sum) {
  torch::NoGradGuard no_grad;
  // Counted on the CPU, wherever the model ran: one copy of the logits per batch.
  const auto logits = outputs.detach().to(torch::kCPU).reshape({-1, outputs.size(-1)});
  const auto labels = targets.reshape({-1}).to(torch::kCPU).to(torch::kLong);
  TORCH_CHECK(logits.size(0) == labels.size(0), "metrics: ", logits.size(0), " predictions for ",
              labels.size(0), " targets");
  const auto n = labels.size(0);
  if (n == 0) return;
  const auto kmax = std::min<std::int64_t>(5, logits.size(1));
  const auto top = std::get<1>(logits.topk(kmax, /*dim=*/1));  // (n, kmax)
  // A label occurs at most once in a row of top: the running sum along k is 1 from its position on.
  within_top_.narrow(0, 0, kmax).add_(top.eq(labels.unsqueeze(1)).cumsum(1, torch::kLong).sum(0));
  if (kmax < 5) within_top_.narrow(0, kmax, 5 - kmax).add_(n);
  const auto cells = num_classes_ * num_classes_;
  confusion_.view({-1}).add_(torch::bincount(labels * num_classes_ + top.select(1, 0), {}, cells));
  loss_sum_ += loss_sum;
  samples_ += n;
}

at::Tensor MetricsAccumulator::packed() const {
  // The counts stay exact in float64 below 2^53.
  return torch::cat({confusion_.view({-1}).to(torch::kDouble),
                     torch::tensor({loss_sum_, static_cast<double>(samples_)}, torch::kDouble),
                     within_top_.to(torch::kDouble)});
}

void MetricsAccumulator::load(const at::Tensor& packed) {
  const auto cells = num_classes_ * num_classes_;
  TORCH_CHECK(packed.dim() == 1 && packed.numel() == cells + 7, "metrics state of ", packed.numel(),
              " values does not fit ", num_classes_, " classes (", cells + 7, " values)");
  const auto values = packed.to(torch::kDouble);
  confusion_ = values.narrow(0, 0, cells).round().to(torch::kLong).view({num_classes_, num_classes_});
  const auto tail = values.narrow(0, cells, 2);
  loss_sum_ = tail[0].item<double>();
  samples_ = static_cast<std::int64_t>(tail[1].item<double>());
  within_top_ = values.narrow(0, cells + 2, 5).round().to(torch::kLong);
}

void MetricsAccumulator::all_reduce(comm::Communicator& comm) {
  auto sums = packed();  // one message
  comm.allreduce(sums, comm::ReduceOp::Sum);
  load(sums);
}

std::int64_t MetricsAccumulator::correct(int k) const {
  return within_top_[k - 1].item<std::int64_t>();
}

EvalMetrics MetricsAccumulator::result() const {
  EvalMetrics m;
  m.samples = samples_;
  if (samples_ == 0) return m;
  const double n = static_cast<double>(samples_);
  m.loss = loss_sum_ / n;
  m.top1 = static_cast<double>(correct(1)) / n;
  m.top3 = static_cast<double>(correct(3)) / n;
  m.top5 = static_cast<double>(correct(5)) / n;
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
  const auto samples = actual.to(torch::kLong).contiguous();
  const auto recall_c = recall.contiguous();
  const auto precision_c = precision.contiguous();
  m.class_samples.assign(samples.data_ptr<std::int64_t>(),
                         samples.data_ptr<std::int64_t>() + samples.numel());
  m.class_recall.assign(recall_c.data_ptr<double>(), recall_c.data_ptr<double>() + recall_c.numel());
  m.class_precision.assign(precision_c.data_ptr<double>(),
                           precision_c.data_ptr<double>() + precision_c.numel());
  m.precision = (precision * present).sum().item<double>() / classes;
  m.recall = (recall * present).sum().item<double>() / classes;
  m.f1 = (f1 * present).sum().item<double>() / classes;
  return m;
}

}  // namespace dtrain::train
