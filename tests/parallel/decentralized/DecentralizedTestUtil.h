// Running the decentralized strategy in tests: node batches that depend only on (node, round), so
// that any number of ranks sees the same data per node, and worlds of 1 (no communicator) or more
// ranks (threads over gloo) whose nodes' parameters are collected by graph index.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/decentralized/DecentralizedOptions.h"
#include "dtrain/parallel/decentralized/DecentralizedStrategy.h"
#include "dtrain/parallel/decentralized/Graph.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel::testing {

// A decentralized configuration: an mlp of one hidden layer on 1x28x28 images, plain SGD.
inline config::RunConfig decentralized_config(const std::string& algorithm, const std::string& graph,
                                              int nodes) {
  config::RunConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.hidden = {16};
  cfg.optim.name = "sgd";
  cfg.optim.lr = 0.1;
  cfg.optim.loss = "cross_entropy";
  cfg.parallel.strategy = "decentralized";
  cfg.parallel.options.get<DecentralizedOptions>("decentralized").algorithm = algorithm;
  auto& g = cfg.parallel.options.get<GraphOptions>("graph");
  g.type = graph;
  g.nodes = nodes;
  if (graph == "random") g.p = 0.5;
  return cfg;
}

// Batch `b` of round `round` of graph node `node`: (rows, 1, 28, 28) and labels.
inline data::Batch node_batch(int node, std::int64_t round, int b, std::int64_t rows) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000003ULL * static_cast<std::uint64_t>(node + 1) +
                                                      7919ULL * static_cast<std::uint64_t>(round) + b);
  auto x = torch::randn({rows, 1, 28, 28}, gen);
  auto y = torch::randint(0, 10, {rows}, gen, torch::kLong);
  return {x, y};
}

// This rank's step input: its nodes' batches, node by node, batches_per_step each.
inline data::Batch rank_batch(const NodeLayout& layout, int rank, std::int64_t round, int per_node,
                              std::int64_t rows) {
  std::vector<torch::Tensor> xs, ys;
  for (int node : layout.local(rank)) {
    for (int b = 0; b < per_node; ++b) {
      auto batch = node_batch(node, round, b, rows);
      xs.push_back(batch.inputs);
      ys.push_back(batch.targets);
    }
  }
  return {torch::cat(xs), torch::cat(ys)};
}

inline models::NetworkPtr decentralized_model(const config::RunConfig& cfg, std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  return models::create_model(cfg.model, models::InputSpec::image(1, 28, 28, 10));
}

inline std::unique_ptr<DecentralizedStrategy> make_decentralized(const config::RunConfig& cfg,
                                                                 models::NetworkPtr model,
                                                                 comm::CommunicatorPtr comm) {
  StrategyContext context{std::move(model), optim::optimizer_factory(cfg.optim),
                          optim::create_loss(cfg.optim.loss), std::move(comm), cfg.parallel};
  context.seed = 3;
  return std::make_unique<DecentralizedStrategy>(std::move(context));
}

struct NodesRun {
  std::map<int, torch::Tensor> nodes;  // graph node -> parameters
  std::map<std::string, torch::Tensor> average;
  std::map<std::string, double> metrics;
};

// Runs `rounds` rounds over `world` ranks (world 1: no communicator) and collects every node.
// `between(strategy, round)` runs on every rank after each round (checkpoints, checks).
inline NodesRun run_nodes(const config::RunConfig& cfg, int world, int rounds, std::int64_t rows = 8,
                          const std::function<void(DecentralizedStrategy&, int)>& between = {}) {
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) models.push_back(decentralized_model(cfg));
  NodesRun out;
  std::mutex mutex;
  auto body = [&](comm::CommunicatorPtr comm) {
    const int rank = comm ? comm->rank() : 0;
    auto strategy = make_decentralized(cfg, models[static_cast<std::size_t>(rank)], comm);
    strategy->set_learning_rate(cfg.optim.lr);
    for (int k = 0; k < rounds; ++k) {
      strategy->train_step(rank_batch(strategy->layout(), rank, k, strategy->batches_per_step(), rows));
      if (between) between(*strategy, k);
    }
    auto average = strategy->model_state();
    auto metrics = strategy->metrics();
    std::lock_guard<std::mutex> lock(mutex);
    for (int node : strategy->layout().local(rank)) out.nodes[node] = strategy->node_parameters(node);
    if (rank == 0) {
      out.average = average;
      out.metrics = metrics;
    }
  };
  if (world == 1) {
    body(nullptr);
  } else {
    dtrain::testing::run_world(world, body);
  }
  return out;
}

inline double max_difference(const std::map<int, torch::Tensor>& a, const std::map<int, torch::Tensor>& b) {
  double worst = 0.0;
  for (const auto& [node, t] : a) worst = std::max(worst, (t - b.at(node)).abs().max().item<double>());
  return worst;
}

// Every node's start: random float64 vectors around 1, a different one per node.
inline std::vector<torch::Tensor> starts(int nodes, std::int64_t length) {
  std::vector<torch::Tensor> out;
  for (int i = 0; i < nodes; ++i) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(17 + static_cast<std::uint64_t>(i));
    out.push_back(torch::randn({length}, gen, torch::kDouble) + 1.0);
  }
  return out;
}

// A checkpoint as DecentralizedStrategy::save writes it, every node at its own start.
inline io::Checkpoint starting_at(const std::vector<torch::Tensor>& start) {
  io::Checkpoint c;
  c.set_tensor("strategy/decentralized/round", torch::tensor({std::int64_t{0}}, torch::kLong));
  c.set_tensor("strategy/decentralized/rho", torch::tensor({1.0}, torch::kDouble));
  for (std::size_t i = 0; i < start.size(); ++i) {
    const auto prefix = "strategy/decentralized/node" + std::to_string(i) + "/";
    c.set_tensor(prefix + "theta", start[i]);
    c.set_tensor(prefix + "samples", torch::tensor({std::int64_t{0}}, torch::kLong));
    c.set_tensor(prefix + "bytes_sent", torch::tensor({0.0}, torch::kDouble));
  }
  return c;
}

inline std::int64_t parameters_of(const config::RunConfig& cfg) {
  std::int64_t length = 0;
  for (const auto& p : decentralized_model(cfg)->parameters()) length += p.numel();
  return length;
}

// `rounds` rounds of cfg's algorithm in float64 at learning rate 0, so that a round only mixes, on
// `world` ranks, every node starting from start[node]; every node's parameters after.
// With `average`, also the strategy's node average (model_state) as one vector.
inline std::map<int, torch::Tensor> mix_only(const config::RunConfig& cfg, int world, int rounds,
                                             const std::vector<torch::Tensor>& start,
                                             torch::Tensor* average = nullptr) {
  const auto checkpoint = starting_at(start);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(decentralized_model(cfg));
    models.back()->to(torch::kDouble);
  }
  std::map<int, torch::Tensor> nodes;
  std::mutex mutex;
  auto body = [&](comm::CommunicatorPtr comm) {
    const int rank = comm ? comm->rank() : 0;
    auto s = make_decentralized(cfg, models[static_cast<std::size_t>(rank)], comm);
    s->load(checkpoint);
    s->set_learning_rate(0.0);
    for (int k = 0; k < rounds; ++k) {
      auto batch = rank_batch(s->layout(), rank, k, s->batches_per_step(), 2);
      s->train_step({batch.inputs.to(torch::kDouble), batch.targets});
    }
    const auto state = s->model_state();
    std::lock_guard<std::mutex> lock(mutex);
    for (int node : s->layout().local(rank)) nodes[node] = s->node_parameters(node);
    if (average && rank == 0) {
      std::vector<torch::Tensor> flat;
      for (const auto& p : models[0]->named_parameters()) flat.push_back(state.at(p.key()).reshape({-1}));
      *average = torch::cat(flat);
    }
  };
  if (world == 1) {
    body(nullptr);
  } else {
    dtrain::testing::run_world(world, body);
  }
  return nodes;
}

// The largest distance of any node's parameters from `target`.
inline double distance_from(const std::map<int, torch::Tensor>& nodes, const torch::Tensor& target) {
  double worst = 0.0;
  for (const auto& [node, t] : nodes) worst = std::max(worst, (t - target).abs().max().item<double>());
  return worst;
}

inline torch::Tensor mean_of(const std::vector<torch::Tensor>& start) {
  return torch::stack(start).mean(0);
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace dtrain::parallel::testing
