// What the decentralized strategy reports and keeps: per-node metrics and the consensus error,
// the node average as the model, and checkpoints holding every node by graph index, so that a run
// continues on another number of ranks (the nodes stay the same, their hosts change).
#include <fmt/format.h>

#include "dtrain/optim/OptimizerState.h"
#include "dtrain/parallel/decentralized/DecentralizedNode.h"

namespace dtrain::parallel {
namespace {

const std::string kPrefix = "strategy/decentralized/";

// Every node's rows of `local` (per_rank, ...) on every rank, in graph order.
torch::Tensor gather_nodes(const comm::CommunicatorPtr& comm, const torch::Tensor& local) {
  if (!comm || comm->size() == 1) return local;
  auto flat = local.contiguous().reshape({-1});
  auto out = torch::empty({flat.numel() * comm->size()}, flat.options());
  comm->allgather(flat, out);
  std::vector<std::int64_t> shape(local.sizes().begin(), local.sizes().end());
  shape[0] *= comm->size();
  return out.view(shape);
}

}  // namespace

// Note [Consensus error]
// As DiNNO's problems/dist_mnist_problem.py: the parameter vectors are L2-normalised and their
// pairwise Euclidean distances taken (the matrix is written as strategy/distance/i/j, i < j);
// node i's consensus error is its mean distance to the other nodes, and the run's is the mean
// over nodes (printed with the min and max over nodes). DiNNO prints the distance of each node
// to the mean of the normalised vectors instead; the pairwise mean is what the seed asks for.
std::map<std::string, double> DecentralizedStrategy::metrics() {
  settle_gossip();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> thetas, stats;
  for (const auto& node : nodes_) {
    thetas.push_back(node->theta / node->theta.norm().clamp_min(1e-30));
    stats.push_back(torch::tensor({static_cast<double>(node->samples), node->bytes_sent}, torch::kDouble));
  }
  const auto all = gather_nodes(context_.comm, torch::stack(thetas));
  const auto counts = gather_nodes(context_.comm, torch::stack(stats));
  const int n = layout_.nodes();
  const auto distances = torch::cdist(all.unsqueeze(0), all.unsqueeze(0)).squeeze(0).to(torch::kDouble);
  std::map<std::string, double> out;
  double low = 0.0, high = 0.0, mean = 0.0, bytes = 0.0;
  for (int i = 0; i < n; ++i) {
    const double own = n > 1 ? distances[i].sum().item<double>() / (n - 1) : 0.0;
    out[fmt::format("consensus/node{}", i)] = own;
    low = i == 0 ? own : std::min(low, own);
    high = i == 0 ? own : std::max(high, own);
    mean += own / n;
    for (int j = i + 1; j < n; ++j) out[fmt::format("distance/{}/{}", i, j)] = distances[i][j].item<double>();
    const double samples = counts[i][0].item<double>();
    const auto size =
        context_.holder_sizes.empty() ? 0 : context_.holder_sizes.at(static_cast<std::size_t>(i));
    out[fmt::format("node{}/epoch", i)] = size > 0 ? std::floor(samples / static_cast<double>(size)) : 0.0;
    out[fmt::format("node{}/bytes_sent", i)] = counts[i][1].item<double>();
    bytes += counts[i][1].item<double>() / n;
  }
  if (options_.adapt_with_combine) {
    // This rank's exchange: the share of its time in flight that overlapped gradient computation.
    out["exchange_overlap"] =
        last_exchange_seconds_ > 0.0 ? last_overlap_seconds_ / last_exchange_seconds_ : 0.0;
    out["exchange_overlap_all_rounds"] = exchange_seconds_ > 0.0 ? overlap_seconds_ / exchange_seconds_ : 0.0;
  }
  if (async_) {
    // Every rank's mixes since the last report (Note [Asynchronous gossip]).
    const auto& s = staleness_;
    const auto all = gather_nodes(
        context_.comm,
        torch::tensor({{s.age_sum, s.age_max, s.mixed, s.skipped, s.node_rounds}}, torch::kDouble));
    const auto sums = all.sum(0);
    const double mixed = sums[2].item<double>(), rounds = sums[4].item<double>();
    out["staleness_mean"] = mixed > 0.0 ? sums[0].item<double>() / mixed : 0.0;
    out["staleness_max"] = all.select(1, 1).max().item<double>();
    out["stale_neighbours_skipped"] = sums[3].item<double>();
    out["stale_neighbours_skipped_per_round"] = rounds > 0.0 ? sums[3].item<double>() / rounds : 0.0;
    staleness_ = Staleness{};
  }
  out["consensus_error"] = mean;
  out["consensus_error_min"] = low;
  out["consensus_error_max"] = high;
  out["forward_pass_count"] = counts[0][0].item<double>();
  out["node_bytes_sent"] = bytes;
  if (options_.algorithm == "cadmm") out["rho"] = rho_;
  return out;
}

MemoryFootprint DecentralizedStrategy::memory_footprint() const {
  std::vector<torch::Tensor> parameters, gradients, state;
  for (const auto& node : nodes_) {
    parameters.push_back(node->theta);
    for (const auto& t : optim::optimizer_state_tensors(*node->optimizer)) state.push_back(t);
    state.insert(state.end(), {node->dual, node->tracker, node->last_gradient, node->push_weight});
  }
  for (const auto& p : model_params_) gradients.push_back(p.grad());
  for (const auto& entry : xhat_) state.push_back(entry.second);
  state.insert(state.end(), {outer_, outer_momentum_});
  return footprint_of(parameters, gradients, state);
}

std::map<std::string, torch::Tensor> DecentralizedStrategy::model_state() const {
  auto* self = const_cast<DecentralizedStrategy*>(this);
  self->settle_gossip();
  const double n = layout_.nodes();
  std::map<std::string, torch::Tensor> state;
  const auto theta = self->node_average(nullptr);
  std::int64_t offset = 0;
  for (std::size_t p = 0; p < model_params_.size(); ++p) {
    state[param_names_[p]] =
        theta.narrow(0, offset, model_params_[p].numel()).view(model_params_[p].sizes()).clone();
    offset += model_params_[p].numel();
  }
  for (std::size_t b = 0; b < model_buffers_.size(); ++b) {
    const bool floating = torch::isFloatingType(model_buffers_[b].scalar_type());
    state[buffer_names_[b]] =
        floating ? self->sum_over_nodes([b](const Node& node) { return node.buffers[b]; }, nullptr) / n
                 : nodes_.front()->buffers[b].clone();
  }
  return state;
}

namespace {

// One node's state by field name; the same fields on every node of a run.
std::map<std::string, torch::Tensor> node_fields(const DecentralizedStrategy::Node& node,
                                                 const optim::NamedParameters& named,
                                                 const std::vector<std::string>& buffer_names) {
  std::map<std::string, torch::Tensor> fields{
      {"theta", node.theta},
      {"samples", torch::tensor({node.samples}, torch::kLong)},
      {"bytes_sent", torch::tensor({node.bytes_sent}, torch::kDouble)}};
  for (std::size_t b = 0; b < buffer_names.size(); ++b) fields["buffer/" + buffer_names[b]] = node.buffers[b];
  if (node.dual.defined()) fields["dual"] = node.dual;
  if (node.tracker.defined()) fields["tracker"] = node.tracker;
  if (node.last_gradient.defined()) fields["last_gradient"] = node.last_gradient;
  if (node.push_weight.defined()) fields["push_weight"] = node.push_weight;
  if (node.optimizer) {
    for (const auto& [key, value] : optim::named_optimizer_state(*node.optimizer, named)) fields[key] = value;
  }
  return fields;
}

}  // namespace

void DecentralizedStrategy::save(io::Checkpoint& checkpoint) const {
  const_cast<DecentralizedStrategy*>(this)->settle_gossip();
  for (const auto& [name, value] : model_state()) checkpoint.set_tensor("model." + name, value);
  optim::NamedParameters named;
  for (std::size_t p = 0; p < model_params_.size(); ++p)
    named.emplace_back(param_names_[p], model_params_[p]);
  std::vector<std::map<std::string, torch::Tensor>> fields;
  for (const auto& node : nodes_) {
    fields.push_back(node_fields(*node, named, buffer_names_));
    if (compressor_) fields.back()["xhat"] = xhat_.at(node->index);
  }
  for (const auto& [key, first] : fields.front()) {
    std::vector<torch::Tensor> rows;
    for (const auto& f : fields) rows.push_back(f.at(key).reshape({1, -1}));
    const auto all = gather_nodes(context_.comm, torch::cat(rows));
    for (int i = 0; i < layout_.nodes(); ++i) {
      checkpoint.set_tensor(fmt::format("{}node{}/{}", kPrefix, i, key), all[i].view(first.sizes()).clone());
    }
  }
  checkpoint.set_tensor(kPrefix + "round", torch::tensor({round_}, torch::kLong));
  checkpoint.set_tensor(kPrefix + "rho", torch::tensor({rho_}, torch::kDouble));
  if (outer_.defined()) {
    checkpoint.set_tensor(kPrefix + "outer", outer_);
    checkpoint.set_tensor(kPrefix + "outer_momentum", outer_momentum_);
  }
  precision_.save(checkpoint);
}

void DecentralizedStrategy::load(const io::Checkpoint& checkpoint) {
  // Nothing may be in flight while the nodes change; the next round sends the loaded states.
  settle_gossip();
  torch::NoGradGuard no_grad;
  precision_.load(checkpoint);
  if (!checkpoint.contains(kPrefix + "round")) {
    // Saved by another strategy: every node starts from its model.
    checkpoint.load_module_state("model", *context_.model);
    std::vector<torch::Tensor> flat;
    for (const auto& p : model_params_) flat.push_back(p.detach().reshape({-1}));
    const auto theta = torch::cat(flat);
    for (auto& node : nodes_) {
      node->theta.copy_(theta);
      for (std::size_t b = 0; b < model_buffers_.size(); ++b) node->buffers[b].copy_(model_buffers_[b]);
    }
    return;
  }
  const auto field = [&](int node, const std::string& key) {
    return checkpoint.tensor(fmt::format("{}node{}/{}", kPrefix, node, key));
  };
  const auto has = [&](int node, const std::string& key) {
    return checkpoint.contains(fmt::format("{}node{}/{}", kPrefix, node, key));
  };
  if (!has(layout_.nodes() - 1, "theta") || has(layout_.nodes(), "theta")) {
    throw std::invalid_argument(fmt::format(
        "checkpoint: saved with another number of graph nodes than this run's {}; resume with the same "
        "parallel.graph.nodes",
        layout_.nodes()));
  }
  optim::NamedParameters named;
  for (std::size_t p = 0; p < model_params_.size(); ++p)
    named.emplace_back(param_names_[p], model_params_[p]);
  for (auto& node : nodes_) {
    const int i = node->index;
    node->theta.copy_(field(i, "theta"));
    node->samples = field(i, "samples").item<std::int64_t>();
    node->bytes_sent = field(i, "bytes_sent").item<double>();
    for (std::size_t b = 0; b < buffer_names_.size(); ++b)
      node->buffers[b].copy_(field(i, "buffer/" + buffer_names_[b]));
    if (has(i, "dual"))
      node->dual = field(i, "dual").to(node->theta.device(), /*non_blocking=*/false, /*copy=*/true);
    if (has(i, "tracker"))
      node->tracker = field(i, "tracker").to(node->theta.device(), /*non_blocking=*/false, /*copy=*/true);
    if (has(i, "last_gradient")) {
      node->last_gradient =
          field(i, "last_gradient").to(node->theta.device(), /*non_blocking=*/false, /*copy=*/true);
    }
    if (node->push_weight.defined() && has(i, "push_weight"))
      node->push_weight.copy_(field(i, "push_weight"));
    if (node->optimizer) {
      std::map<std::string, torch::Tensor> entries;
      const auto prefix = fmt::format("{}node{}/", kPrefix, i);
      for (const auto& [key, value] : checkpoint.tensors()) {
        if (key.rfind(prefix + "optimizer", 0) == 0) entries.emplace(key.substr(prefix.size()), value);
      }
      optim::load_named_optimizer_state(*node->optimizer, named, entries);
    }
  }
  for (auto& [j, xhat] : xhat_) xhat.copy_(field(j, "xhat"));
  round_ = checkpoint.tensor(kPrefix + "round").item<std::int64_t>();
  rho_ = checkpoint.tensor(kPrefix + "rho").item<double>();
  if (outer_.defined() && checkpoint.contains(kPrefix + "outer")) {
    outer_.copy_(checkpoint.tensor(kPrefix + "outer"));
    outer_momentum_.copy_(checkpoint.tensor(kPrefix + "outer_momentum"));
  }
  graph_.reset();
  start_round();
}

}  // namespace dtrain::parallel
