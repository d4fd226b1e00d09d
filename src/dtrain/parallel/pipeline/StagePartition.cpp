// See StagePartition.h and Note [Balancing stages].
#include "dtrain/parallel/pipeline/StagePartition.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "dtrain/util/Clock.h"

namespace dtrain::parallel::pipeline {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Minimises, over cuts of layers [0, L) into S non-empty stages, the largest cost(j, i) of a stage
// [j, i), taking the earliest j on ties; returns the bounds. cost(j, i) = kInfinity forbids a stage.
template <class Cost>
StageBounds min_max_partition(int layers, int stages, const Cost& cost, double* best_value) {
  // best[s][i]: the smallest bottleneck of layers [0, i) in s stages; from[s][i] its last cut.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, kInfinity));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(layers + 1, -1));
  best[0][0] = 0.0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= layers - (stages - s); ++i) {
      for (int j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == kInfinity) continue;
        const double value = std::max(best[s - 1][j], cost(j, i));
        if (value < best[s][i]) {
          best[s][i] = value;
          from[s][i] = j;
        }
      }
    }
  }
  StageBounds bounds(stages + 1, 0);
  bounds[stages] = layers;
  for (int s = stages; s > 0; --s) bounds[s - 1] = from[s][bounds[s]];
  if (best_value) *best_value = best[stages][layers];
  return bounds;
}

}  // namespace

StageBounds balanced_bounds(const std::vector<double>& weights, int stages) {
  const int layers = static_cast<int>(weights.size());
  if (stages < 1 || stages > layers) {
    throw std::invalid_argument(
        fmt::format("pipeline: cannot cut {} layers into {} non-empty stages", layers, stages));
  }
  std::vector<double> prefix(layers + 1, 0.0);
  for (int i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + weights[i];
  const auto weight = [&](int j, int i) { return prefix[i] - prefix[j]; };
  double bottleneck = 0.0;
  min_max_partition(layers, stages, weight, &bottleneck);
  // Second pass: the fewest layers in the largest stage among cuts that keep the bottleneck. The
  // same prefix sums give the same sums, so the first pass's cut stays feasible.
  return min_max_partition(
      layers, stages,
      [&](int j, int i) { return weight(j, i) <= bottleneck ? static_cast<double>(i - j) : kInfinity; },
      nullptr);
}

StageBounds bounds_from_cut_points(const std::vector<int>& cut_points, int layers, int stages) {
  if (static_cast<int>(cut_points.size()) != stages - 1) {
    throw std::invalid_argument(fmt::format(
        "parallel.pipeline.cut_points: {} stages need {} cut points (the first layer of stages 1..{}), found "
        "{}; e.g. cut_points: [{}]",
        stages, stages - 1, stages - 1, cut_points.size(), layers / 2));
  }
  StageBounds bounds{0};
  for (const int cut : cut_points) {
    if (cut <= bounds.back() || cut >= layers) {
      throw std::invalid_argument(fmt::format(
          "parallel.pipeline.cut_points: [{}] must be strictly increasing layer indices in [1, {}] (the "
          "model has {} layers); {} is not",
          fmt::join(cut_points, ", "), layers - 1, layers, cut));
    }
    bounds.push_back(cut);
  }
  bounds.push_back(layers);
  return bounds;
}

std::vector<double> layer_parameter_counts(const models::Network& network) {
  std::vector<double> counts;
  for (const auto& layer : network.layers()->children()) {
    double n = 0.0;
    for (const auto& p : layer->parameters(/*recurse=*/true)) n += static_cast<double>(p.numel());
    counts.push_back(n);
  }
  return counts;
}

std::vector<double> measure_layer_seconds(models::Network& network, const models::InputSpec& input,
                                          std::int64_t samples, int repeats) {
  const bool was_training = network.is_training();
  network.eval();
  // Measured where the model lives; on a GPU each run is timed to its kernels' end.
  const auto device =
      network.parameters().empty() ? torch::Device(torch::kCPU) : network.parameters().front().device();
  const auto settle = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::Tensor x;
  if (input.is_tokens()) {
    x = torch::arange(samples * input.seq_len, torch::TensorOptions().dtype(torch::kLong).device(device))
            .remainder(input.vocab_size)
            .view({samples, -1});
  } else {
    std::vector<std::int64_t> shape{samples};
    shape.insert(shape.end(), input.sample_shape.begin(), input.sample_shape.end());
    std::int64_t numel = 1;
    for (const auto d : shape) numel *= d;
    const auto dtype =
        network.parameters().empty() ? torch::kFloat : network.parameters().front().scalar_type();
    x = torch::linspace(0.0, 1.0, numel, torch::TensorOptions().dtype(dtype).device(device)).view(shape);
  }
  std::vector<double> seconds;
  bool first = true;
  for (auto& layer : network.stages()) {
    const auto module = layer.ptr();
    std::vector<torch::Tensor> wrt;
    for (const auto& p : module->parameters(/*recurse=*/true)) {
      if (p.requires_grad()) wrt.push_back(p);
    }
    std::vector<double> runs;
    torch::Tensor y;
    for (int r = 0; r <= repeats; ++r) {
      auto in = x.detach();
      std::vector<torch::Tensor> inputs = wrt;
      // The data entering the first layer needs no gradient in training; every later input does.
      if (!first && torch::isFloatingType(in.scalar_type())) {
        in.requires_grad_(true);
        inputs.push_back(in);
      }
      settle();
      const auto start = util::Clock::now();
      y = layer.forward(in);
      if (!inputs.empty() && y.requires_grad()) {
        torch::autograd::grad({y}, inputs, {torch::ones_like(y)}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
      }
      settle();
      if (r > 0) runs.push_back(util::seconds_since(start));  // r == 0 warms up
    }
    std::nth_element(runs.begin(), runs.begin() + runs.size() / 2, runs.end());
    seconds.push_back(runs[runs.size() / 2]);
    x = y.detach();
    first = false;
  }
  if (was_training) network.train();
  return seconds;
}

std::string describe_bounds(const StageBounds& bounds, const std::vector<double>& parameter_counts) {
  std::string out;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    double n = 0.0;
    for (int i = bounds[s]; i < bounds[s + 1]; ++i) n += parameter_counts[i];
    const auto layers = bounds[s + 1] - 1 == bounds[s]
                            ? fmt::format("layer {}", bounds[s])
                            : fmt::format("layers {}-{}", bounds[s], bounds[s + 1] - 1);
    out += fmt::format("{}stage {}: {} ({} parameters)", s == 0 ? "" : "; ", s, layers,
                       static_cast<std::int64_t>(n));
  }
  return out;
}

}  // namespace dtrain::parallel::pipeline
