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

}  // namespace dtrain::parallel::testing
