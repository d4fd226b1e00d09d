// Adapt-with-combine dsgd (Note [Adapt with combine]) through the strategy's real exchange between
// ranks: its rounds equal x_i <- sum_j W_ij x_j - lr g_i(x_i), every x of the round before, computed
// here by hand from the Metropolis weights and autograd; they are not plain dsgd's rounds; the
// numbers are the same on any number of ranks; the overlap is reported; and what cannot combine
// so is refused by name.
#include <gtest/gtest.h>

#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

config::RunConfig adapt_with_combine(config::RunConfig cfg) {
  cfg.parallel.options.get<DecentralizedOptions>("decentralized").adapt_with_combine = true;
  return cfg;
}

// The gradient of cfg's model and loss at the flat parameters `theta` on `batch`, in float64.
torch::Tensor gradient_at(const config::RunConfig& cfg, const torch::Tensor& theta,
                          const data::Batch& batch) {
  auto model = decentralized_model(cfg);
  model->to(torch::kDouble);
  std::int64_t offset = 0;
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      p.copy_(theta.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }
  optim::create_loss(cfg.optim.loss)(model->forward(batch.inputs.to(torch::kDouble)), batch.targets)
      .backward();
  std::vector<torch::Tensor> parts;
  for (const auto& p : model->parameters()) parts.push_back(p.grad().reshape({-1}));
  return torch::cat(parts);
}

struct Rounds {
  std::map<int, torch::Tensor> nodes;
  std::map<std::string, double> metrics;  // rank 0's
};

// `rounds` rounds at learning rate `lr` in float64 on `world` ranks from start[node]; batches of
// two rows per node, as node_batch draws them.
Rounds run_rounds(const config::RunConfig& cfg, int world, int rounds, double lr,
                  const std::vector<torch::Tensor>& start) {
  const auto checkpoint = starting_at(start);
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(decentralized_model(cfg));
    models.back()->to(torch::kDouble);
  }
  Rounds out;
  std::mutex mutex;
  auto body = [&](comm::CommunicatorPtr comm) {
    const int rank = comm ? comm->rank() : 0;
    auto s = make_decentralized(cfg, models[static_cast<std::size_t>(rank)], comm);
    s->load(checkpoint);
    s->set_learning_rate(lr);
    for (int k = 0; k < rounds; ++k) {
      auto batch = rank_batch(s->layout(), rank, k, 1, 2);
      s->train_step({batch.inputs.to(torch::kDouble), batch.targets});
    }
    const auto metrics = s->metrics();
    std::lock_guard<std::mutex> lock(mutex);
    for (int node : s->layout().local(rank)) out.nodes[node] = s->node_parameters(node);
    if (rank == 0) out.metrics = metrics;
  };
  if (world == 1) {
    body(nullptr);
  } else {
    dtrain::testing::run_world(world, body);
  }
  return out;
}

TEST(AdaptWithCombine, RoundsAreTheMixOfTheRoundBeforeLessTheOwnGradient) {
  const double lr = 0.1;
  const int nodes = 4, rounds = 2;
  const auto cfg = adapt_with_combine(decentralized_config("dsgd", "cycle", nodes));
  const auto start = starts(nodes, parameters_of(cfg));
  const auto w = make_graph(cfg.parallel.options.get<GraphOptions>("graph"), nodes, 3).mixing_matrix();
  std::vector<torch::Tensor> x = start;
  for (int k = 0; k < rounds; ++k) {
    std::vector<torch::Tensor> next;
    for (int i = 0; i < nodes; ++i) {
      auto mixed = torch::zeros_like(x[0]);
      for (int j = 0; j < nodes; ++j) mixed += w[i][j] * x[static_cast<std::size_t>(j)];
      next.push_back(mixed - lr * gradient_at(cfg, x[static_cast<std::size_t>(i)], node_batch(i, k, 0, 2)));
    }
    x = next;
  }
  std::map<int, torch::Tensor> expected;
  for (int i = 0; i < nodes; ++i) expected[i] = x[static_cast<std::size_t>(i)];
  // One node per rank (every neighbour across a link), two per rank, and all in one process.
  for (const int world : {4, 2, 1}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    const auto run = run_rounds(cfg, world, rounds, lr, start);
    EXPECT_LT(max_difference(run.nodes, expected), 1e-10);
    if (world > 1) {
      const double overlap = run.metrics.at("exchange_overlap");
      EXPECT_GE(overlap, 0.0);
      EXPECT_LE(overlap, 1.0);
      EXPECT_GT(run.metrics.at("node_bytes_sent"), 0.0);
    }
  }
  // Plain dsgd takes its gradient at the mixed point instead: other numbers.
  const auto plain = run_rounds(decentralized_config("dsgd", "cycle", nodes), 2, rounds, lr, start);
  EXPECT_GT(max_difference(plain.nodes, expected), 1e-6);
}

TEST(AdaptWithCombine, PushSumRoundsMixTheRoundBeforeAndStepFromThereOnADirectedRing) {
  const double lr = 0.1;
  const int nodes = 4, rounds = 3;
  // A directed ring where node 0 keeps 0.9: W is column stochastic only, so the weights move.
  auto cfg = adapt_with_combine(decentralized_config("push_sum", "directed_cycle", nodes));
  cfg.parallel.options.get<GraphOptions>("graph").weights = "0-1:0.1";
  const auto start = starts(nodes, parameters_of(cfg));
  const auto w = make_graph(cfg.parallel.options.get<GraphOptions>("graph"), nodes, 3).mixing_matrix();
  std::vector<torch::Tensor> x = start;
  std::vector<double> weight(nodes, 1.0);
  for (int k = 0; k < rounds; ++k) {
    std::vector<torch::Tensor> next;
    std::vector<double> next_weight;
    for (int i = 0; i < nodes; ++i) {
      auto mixed = torch::zeros_like(x[0]);
      double mixed_weight = 0.0;
      for (int j = 0; j < nodes; ++j) {
        mixed += w[i][j] * x[static_cast<std::size_t>(j)];
        mixed_weight += w[i][j] * weight[static_cast<std::size_t>(j)];
      }
      const auto own = x[static_cast<std::size_t>(i)] / weight[static_cast<std::size_t>(i)];  // z_i
      const auto z = mixed / mixed_weight - lr * gradient_at(cfg, own, node_batch(i, k, 0, 2));
      next.push_back(z * mixed_weight);
      next_weight.push_back(mixed_weight);
    }
    x = next;
    weight = next_weight;
  }
  EXPECT_NEAR(weight[1], 0.6, 0.3);  // the weights moved (0.6 after the first round)
  EXPECT_NE(weight[1], 1.0);
  std::map<int, torch::Tensor> expected;
  for (int i = 0; i < nodes; ++i)
    expected[i] = x[static_cast<std::size_t>(i)] / weight[static_cast<std::size_t>(i)];
  for (const int world : {4, 2, 1}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    const auto run = run_rounds(cfg, world, rounds, lr, start);
    EXPECT_LT(max_difference(run.nodes, expected), 1e-10);
    if (world > 1) {
      EXPECT_GE(run.metrics.at("exchange_overlap"), 0.0);
    }
  }
  // Plain push-sum steps before it mixes: other numbers.
  auto plain = cfg;
  plain.parallel.options.get<DecentralizedOptions>("decentralized").adapt_with_combine = false;
  EXPECT_GT(max_difference(run_rounds(plain, 2, rounds, lr, start).nodes, expected), 1e-6);
  // On a doubly stochastic W every weight stays 1, and the rounds are adapt-with-combine dsgd's.
  const auto cycle_push =
      run_rounds(adapt_with_combine(decentralized_config("push_sum", "cycle", nodes)), 2, rounds, lr, start);
  const auto cycle_dsgd =
      run_rounds(adapt_with_combine(decentralized_config("dsgd", "cycle", nodes)), 2, rounds, lr, start);
  EXPECT_LT(max_difference(cycle_push.nodes, cycle_dsgd.nodes), 1e-12);
}

TEST(AdaptWithCombine, WhatCannotCombineSoIsRefusedByName) {
  const auto message_of = [](config::RunConfig cfg) {
    return error_of([&] { make_decentralized(cfg, decentralized_model(cfg), nullptr); });
  };
  const auto cadmm = message_of(adapt_with_combine(decentralized_config("cadmm", "cycle", 4)));
  EXPECT_EQ(
      cadmm.rfind("parallel.decentralized.adapt_with_combine: a setting of algorithms dsgd and push_sum, "
                  "but parallel.decentralized.algorithm is cadmm",
                  0),
      0u)
      << cadmm;
  auto both = adapt_with_combine(decentralized_config("dsgd", "cycle", 4));
  both.parallel.options.get<DecentralizedOptions>("decentralized").hierarchical = true;
  const auto hierarchical = message_of(both);
  EXPECT_EQ(
      hierarchical.rfind("parallel.decentralized.adapt_with_combine: overlaps the neighbour exchange", 0), 0u)
      << hierarchical;
  const auto fp16 = error_of([] {
    const auto cfg = adapt_with_combine(decentralized_config("dsgd", "cycle", 4));
    StrategyContext context{decentralized_model(cfg), optim::optimizer_factory(cfg.optim),
                            optim::create_loss(cfg.optim.loss), nullptr, cfg.parallel};
    context.precision = optim::Precision::Fp16;
    DecentralizedStrategy strategy(std::move(context));
  });
  EXPECT_EQ(fp16.rfind("parallel.decentralized.adapt_with_combine: fp16 agrees on skipping a step", 0), 0u)
      << fp16;
  for (const auto& message : {cadmm, hierarchical, fp16}) EXPECT_EQ(message.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace dtrain::parallel::testing
