#include "dtrain/train/Metrics.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "dtrain/comm/Communicator.h"

namespace dtrain::train {

std::map<std::string, double> EvalMetrics::named(const std::string& prefix) const {
  std::map<std::string, double> out{
      {prefix + "loss", loss}, {prefix + "top1", top1}, {prefix + "top3", top3}, {prefix + "top5", top5}};
  if (class_metrics) {
    out[prefix + "precision"] = precision;
    out[prefix + "recall"] = recall;
    out[prefix + "f1"] = f1;
    out[prefix + "mcc"] = mcc;
  }
  if (perplexity) out[prefix + "perplexity"] = *perplexity;
  return out;
}

double matthews_correlation(const at::Tensor& confusion) {
  const auto c = confusion.to(torch::kCPU).to(torch::kDouble);
  const auto actual = c.sum(1);     // t_k: how often class k was the target
  const auto predicted = c.sum(0);  // p_k: how often it was predicted
  const double correct = c.trace().item<double>();
  const double samples = c.sum().item<double>();
  const double cov_ytyp = correct * samples - actual.dot(predicted).item<double>();
  const double cov_ypyp = samples * samples - predicted.dot(predicted).item<double>();
  const double cov_ytyt = samples * samples - actual.dot(actual).item<double>();
  if (cov_ypyp * cov_ytyt == 0.0) return 0.0;
  return cov_ytyp / std::sqrt(cov_ytyt * cov_ypyp);
}

namespace {

std::int64_t confusion_side(std::int64_t num_classes) {
  return num_classes <= kMaxConfusionClasses ? num_classes : 0;
}

}  // namespace

MetricsAccumulator::MetricsAccumulator(std::int64_t num_classes, bool language_model)
    : num_classes_(num_classes),
      language_model_(language_model),
      loss_sum_(torch::zeros({1}, torch::kDouble)),
      within_top_(torch::zeros({5}, torch::kLong)),
      confusion_(torch::zeros({confusion_side(num_classes), confusion_side(num_classes)}, torch::kLong)) {
  TORCH_CHECK(num_classes > 0, "metrics need at least one class, got ", num_classes);
}

void MetricsAccumulator::follow(const c10::Device& device) {
  if (loss_sum_.device() == device) return;
  loss_sum_ = loss_sum_.to(device);
  within_top_ = within_top_.to(device);
  confusion_ = confusion_.to(device);
}

void MetricsAccumulator::count(const at::Tensor& outputs, const at::Tensor& targets) {
  torch::NoGradGuard no_grad;
  follow(outputs.device());
  const auto logits = outputs.detach().reshape({-1, outputs.size(-1)});
  const auto labels = targets.reshape({-1}).to(outputs.device()).to(torch::kLong);
  TORCH_CHECK(logits.size(0) == labels.size(0), "metrics: ", logits.size(0), " predictions for ",
              labels.size(0), " targets");
  const auto n = labels.size(0);
  if (n == 0) return;
  const auto kmax = std::min<std::int64_t>(5, logits.size(1));
  const auto top = std::get<1>(logits.topk(kmax, /*dim=*/1));  // (n, kmax)
  // A label occurs at most once in a row of top: the running sum along k is 1 from its position on.
  within_top_.narrow(0, 0, kmax).add_(top.eq(labels.unsqueeze(1)).cumsum(1, torch::kLong).sum(0));
  if (kmax < 5) within_top_.narrow(0, kmax, 5 - kmax).add_(n);
  if (confusion_.numel() > 0) {
    // index_add_ rather than bincount: a GPU's bincount reads the largest index on the host first.
    const auto cells = labels * num_classes_ + top.select(1, 0);
    confusion_.view({-1}).index_add_(0, cells, torch::ones_like(cells));
  }
  samples_ += n;
}

void MetricsAccumulator::add(const at::Tensor& outputs, const at::Tensor& targets, double loss_sum) {
  count(outputs, targets);
  loss_sum_.add_(loss_sum);
}

void MetricsAccumulator::add_mean(const at::Tensor& outputs, const at::Tensor& targets,
                                  const util::DeviceScalar& mean_loss) {
  count(outputs, targets);
  const auto n = static_cast<double>(targets.numel());
  if (mean_loss.pending()) {
    loss_sum_.add_(mean_loss.as_tensor().to(loss_sum_.device()) * n);
  } else {
    loss_sum_.add_(mean_loss.value() * n);
  }
}

at::Tensor MetricsAccumulator::packed() const {
  // The counts stay exact in float64 below 2^53.
  const auto samples = torch::full({1}, static_cast<double>(samples_), loss_sum_.options());
  return torch::cat(
      {confusion_.view({-1}).to(torch::kDouble), loss_sum_, samples, within_top_.to(torch::kDouble)});
}

void MetricsAccumulator::load(const at::Tensor& packed) {
  const auto side = confusion_side(num_classes_);
  const auto cells = side * side;
  TORCH_CHECK(packed.dim() == 1 && packed.numel() == cells + 7, "metrics state of ", packed.numel(),
              " values does not fit ", num_classes_, " classes (", cells + 7, " values)");
  const auto values = packed.to(torch::kDouble);
  confusion_ = values.narrow(0, 0, cells).round().to(torch::kLong).view({side, side});
  loss_sum_ = values.narrow(0, cells, 1).clone();
  samples_ = static_cast<std::int64_t>(values[cells + 1].item<double>());
  within_top_ = values.narrow(0, cells + 2, 5).round().to(torch::kLong);
}

void MetricsAccumulator::all_reduce(comm::Communicator& comm) {
  auto sums = packed();  // one message
  comm.allreduce(sums, comm::ReduceOp::Sum);
  load(sums);
}

EvalMetrics MetricsAccumulator::result() const {
  EvalMetrics m;
  m.samples = samples_;
  if (samples_ == 0) return m;
  const double n = static_cast<double>(samples_);
  m.loss = loss_sum_.item<double>() / n;
  const auto hits = within_top_.to(torch::kCPU);
  const auto correct = [&](int k) { return static_cast<double>(hits[k - 1].item<std::int64_t>()); };
  m.top1 = correct(1) / n;
  m.top3 = correct(3) / n;
  m.top5 = correct(5) / n;
  if (language_model_) m.perplexity = std::exp(m.loss);
  if (confusion_.numel() == 0) {
    m.class_metrics = false;
    return m;
  }
  const auto confusion = confusion_.to(torch::kCPU).to(torch::kDouble);
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
  const auto f1_c = f1.contiguous();
  m.class_f1.assign(f1_c.data_ptr<double>(), f1_c.data_ptr<double>() + f1_c.numel());
  m.mcc = matthews_correlation(confusion);
  m.precision = (precision * present).sum().item<double>() / classes;
  m.recall = (recall * present).sum().item<double>() / classes;
  m.f1 = (f1 * present).sum().item<double>() / classes;
  return m;
}

}  // namespace dtrain::train
