// See DadExchange.h.
#include "dtrain/parallel/dad/DadExchange.h"

#include <torch/torch.h>

#include <algorithm>

#include "dtrain/util/Clock.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::parallel {

// Note [dAD's mean over ranks]
// Each rank's loss is the mean over its own samples, so its Δ already carries 1/B_r, and
// data_parallel's gradient is the mean over ranks of the ranks' gradients, (1/S) Σ_r Δ_rᵀ X_r;
// with a short last batch that is not the mean over all samples, and dAD must give what
// data_parallel gives. So the gathered products are summed and divided by S. The authors'
// runner sums without dividing (S times data_parallel's gradient), which we do not copy.
// Ranks may hold different numbers of rows (a short last batch): each pads its rows with zeros
// to the largest count, agreed in a first small all-gather, and zero rows add nothing to Δᵀ X.

namespace {

constexpr util::EnumNames<LayerMethod, 3> kMethodNames{
    {{{LayerMethod::Gradient, "gradient"}, {LayerMethod::Dad, "dad"}, {LayerMethod::RankDad, "rankdad"}}}};

// What this rank contributes for one layer before padding.
struct Local {
  torch::Tensor input, delta;  // dAD: (n, d_in), (n, d_out)
  LowRankFactors factors;      // rank-dAD
  std::int64_t count = 0;      // dAD: rows; rank-dAD: components
};

std::vector<Local> local_parts(const std::vector<ExchangeLayer>& layers, const PowerIterationOptions& power,
                               at::Generator generator) {
  std::vector<Local> parts;
  for (const auto& layer : layers) {
    Local part;
    part.input = layer.tap->input();
    part.delta = layer.tap->delta();
    if (layer.method == LayerMethod::RankDad) {
      part.factors = factor_outer_product(part.delta, part.input, power, generator);
      part.count = part.factors.rank();
    } else {
      part.count = part.input.size(0);
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

// Every rank's counts -> the largest of each, which fixes the padded layout.
std::vector<std::int64_t> agreed_counts(comm::Communicator* comm, const std::vector<Local>& parts) {
  auto counts = torch::empty({static_cast<std::int64_t>(parts.size())}, torch::kLong);
  for (std::size_t i = 0; i < parts.size(); ++i) counts[i] = parts[i].count;
  if (comm && comm->size() > 1) {
    auto all = torch::empty({comm->size() * counts.numel()}, torch::kLong);
    comm->allgather(counts, all);
    counts = std::get<0>(all.view({comm->size(), counts.numel()}).max(0));
  }
  std::vector<std::int64_t> out(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) out[i] = counts[i].item<std::int64_t>();
  return out;
}

// The values one layer sends, zero-padded to `count` rows (dAD) or components (rank-dAD).
torch::Tensor packed(const ExchangeLayer& layer, const Local& part, std::int64_t count,
                     const torch::TensorOptions& o) {
  const auto d_in = layer.tap->in_features;
  const auto d_out = layer.tap->out_features;
  if (layer.method == LayerMethod::Dad) {
    auto block = torch::zeros({count, d_in + d_out}, o);
    block.narrow(0, 0, part.count).narrow(1, 0, d_in).copy_(part.input);
    block.narrow(0, 0, part.count).narrow(1, d_in, d_out).copy_(part.delta);
    return block.view({-1});
  }
  auto left = torch::zeros({d_out, count}, o);
  auto right = torch::zeros({d_in, count}, o);
  if (part.count > 0) {
    left.narrow(1, 0, part.count).copy_(part.factors.left);
    right.narrow(1, 0, part.count).copy_(part.factors.right);
  }
  return torch::cat({left.view({-1}), right.view({-1})});
}

std::int64_t packed_size(const ExchangeLayer& layer, std::int64_t count) {
  return count * (layer.tap->in_features + layer.tap->out_features);
}

void set_gradient(torch::Tensor& parameter, const torch::Tensor& value) {
  auto& grad = parameter.mutable_grad();
  if (grad.defined() && grad.sizes() == value.sizes()) {
    grad.copy_(value);
  } else {
    grad = value.clone();
  }
}

// `received` (S, total) rows of every rank's packed values; rebuilds layer i from its slice.
void rebuild(const ExchangeLayer& layer, const torch::Tensor& slices, std::int64_t count, int world) {
  auto& module = *layer.tap->module;
  const auto d_in = layer.tap->in_features;
  const auto d_out = layer.tap->out_features;
  if (layer.method == LayerMethod::Dad) {
    const auto rows = slices.reshape({world * count, d_in + d_out});
    const auto x = rows.narrow(1, 0, d_in);
    const auto delta = rows.narrow(1, d_in, d_out);
    set_gradient(module.weight, delta.t().mm(x).div_(world));
    if (module.bias.defined() && module.bias.requires_grad())
      set_gradient(module.bias, delta.sum(0).div_(world));
    return;
  }
  const auto left = slices.narrow(1, 0, d_out * count).reshape({world, d_out, count});
  const auto right = slices.narrow(1, d_out * count, d_in * count).reshape({world, d_in, count});
  // Σ_r left_r right_rᵀ as one product over the ranks' components side by side.
  const auto l = left.permute({1, 0, 2}).reshape({d_out, world * count});
  const auto r = right.permute({1, 0, 2}).reshape({d_in, world * count});
  set_gradient(module.weight, l.mm(r.t()).div_(world));
}

}  // namespace

std::string to_string(LayerMethod method) {
  return kMethodNames.name(method);
}

ExchangeTiming exchange_and_rebuild(comm::Communicator* comm, const std::vector<ExchangeLayer>& layers,
                                    const PowerIterationOptions& power, at::Generator generator) {
  ExchangeTiming timing;
  if (layers.empty()) return timing;
  torch::NoGradGuard no_grad;
  const auto start = util::Clock::now();
  const auto parts = local_parts(layers, power, generator);
  const int world = comm ? comm->size() : 1;
  auto t0 = util::Clock::now();
  const auto counts = agreed_counts(comm, parts);
  timing.communication += util::seconds_since(t0);

  const auto options = layers.front().tap->module->weight.options();
  std::vector<torch::Tensor> pieces;
  std::int64_t ranks = 0, rank_layers = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    pieces.push_back(packed(layers[i], parts[i], counts[i], options));
    if (layers[i].method == LayerMethod::RankDad) {
      ranks += counts[i];
      ++rank_layers;
    }
  }
  auto mine = torch::cat(pieces);
  auto received = mine.view({1, -1});
  if (world > 1) {
    auto all = torch::empty({world * mine.numel()}, mine.options());
    t0 = util::Clock::now();
    comm->allgather(mine, all);
    timing.communication += util::seconds_since(t0);
    received = all.view({world, mine.numel()});
  }
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto size = packed_size(layers[i], counts[i]);
    rebuild(layers[i], received.narrow(1, offset, size), counts[i], world);
    offset += size;
  }
  timing.compute = std::max(0.0, util::seconds_since(start) - timing.communication);
  timing.mean_rank = rank_layers > 0 ? static_cast<double>(ranks) / static_cast<double>(rank_layers) : 0.0;
  return timing;
}

}  // namespace dtrain::parallel
