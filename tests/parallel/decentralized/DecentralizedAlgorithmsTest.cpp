// Gossip on directed and time-varying graphs through the strategy's real exchange between ranks:
// the one-peer exponential graph averages exactly after log2(n) rounds, the Base-(k+1) graph for
// node counts that are no power of two; push-sum reaches the true average on a directed ring whose
// column-stochastic weights lead plain averaging elsewhere; push-sum gives the same numbers on any
// number of ranks and continues from a checkpoint; and what an algorithm cannot run on is refused
// by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "dtrain/io/Checkpoint.h"
#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

TEST(GossipMixing, OnePeerExponentialGraphAveragesExactlyAfterLog2nRounds) {
  // 8 nodes on 2 ranks and 16 on 4: four nodes per rank, the one-peer arcs crossing ranks.
  for (const auto& [nodes, world] : {std::pair<int, int>{8, 2}, {16, 4}}) {
    for (const std::string algorithm : {"dsgd", "push_sum"}) {
      SCOPED_TRACE(algorithm + " on " + std::to_string(nodes) + " nodes");
      const auto cfg = decentralized_config(algorithm, "one_peer_exponential", nodes);
      const auto start = starts(nodes, parameters_of(cfg));
      const auto average = mean_of(start);
      const int rounds = static_cast<int>(std::log2(nodes));
      EXPECT_GT(distance_from(mix_only(cfg, world, rounds - 1, start), average), 0.1);
      const auto exact = mix_only(cfg, world, rounds, start);
      const double error = distance_from(exact, average);
      RecordProperty(algorithm + "_" + std::to_string(nodes) + "_nodes_error", fmt::format("{:.3g}", error));
      EXPECT_LT(error, 1e-14);  // float64 rounding of the mean alone
      EXPECT_EQ(max_difference(mix_only(cfg, 1, rounds, start), exact), 0.0);
    }
  }
}

TEST(GossipMixing, BaseGraphAveragesExactlyForNodeCountsThatAreNoPowerOfTwo) {
  // 6 nodes, one peer, on 3 ranks (five rounds); 12 nodes, two peers, on 4 ranks (three rounds).
  for (const auto& [nodes, peers, world] : {std::tuple<int, int, int>{6, 1, 3}, {12, 2, 4}}) {
    SCOPED_TRACE(std::to_string(nodes) + " nodes");
    auto cfg = decentralized_config("dsgd", "base", nodes);
    cfg.parallel.options.get<GraphOptions>("graph").peers = peers;
    const auto start = starts(nodes, parameters_of(cfg));
    const auto average = mean_of(start);
    const int rounds = static_cast<int>(base_graph_rounds(nodes, peers).size());
    EXPECT_GT(distance_from(mix_only(cfg, world, rounds - 1, start), average), 0.1);
    const auto exact = mix_only(cfg, world, rounds, start);
    const double error = distance_from(exact, average);
    RecordProperty(std::to_string(nodes) + "_nodes_error", fmt::format("{:.3g}", error));
    EXPECT_LT(error, 1e-13);
    EXPECT_EQ(max_difference(mix_only(cfg, 1, rounds, start), exact), 0.0);
  }
}

TEST(GossipMixing, StaticExponentialGraphMixesOnEveryNumberOfRanksAlike) {
  auto cfg = decentralized_config("dsgd", "exponential", 6);
  const auto start = starts(6, parameters_of(cfg));
  // Offsets 1, 2 and 4, weights 1/4: the error halves about every round, to the mean it keeps.
  const auto one = mix_only(cfg, 1, 40, start);
  EXPECT_LT(distance_from(one, mean_of(start)), 1e-10);
  for (int world : {2, 3}) EXPECT_EQ(max_difference(mix_only(cfg, world, 40, start), one), 0.0) << world;
}

// A directed ring where node 0 keeps 0.9 of what it holds: every column of W sums to one, rows 0
// and 1 do not (W's Perron vector is (0.625, 0.125, 0.125, 0.125)).
config::RunConfig lopsided_ring(const std::string& algorithm) {
  auto cfg = decentralized_config(algorithm, "directed_cycle", 4);
  cfg.parallel.options.get<GraphOptions>("graph").weights = "0-1:0.1";
  return cfg;
}

TEST(PushSum, ReachesTheTrueAverageOnADirectedRingWherePlainAveragingDoesNot) {
  const auto cfg = lopsided_ring("push_sum");
  const auto start = starts(4, parameters_of(cfg));
  const auto average = mean_of(start);
  // Plain averaging with the same W: x <- W x, 100 times, leaves node 0 near 2.5 times the mean.
  const auto w = make_graph(cfg.parallel.options.get<GraphOptions>("graph"), 4, 3).mixing_matrix();
  std::vector<torch::Tensor> plain = start;
  for (int k = 0; k < 100; ++k) {
    std::vector<torch::Tensor> next;
    for (int i = 0; i < 4; ++i) {
      auto sum = torch::zeros_like(plain[0]);
      for (int j = 0; j < 4; ++j) sum += w[i][j] * plain[static_cast<std::size_t>(j)];
      next.push_back(sum);
    }
    plain = next;
  }
  EXPECT_NEAR((plain[0] / average).median().item<double>(), 2.5, 1e-6);
  std::map<int, torch::Tensor> plain_nodes;
  for (int i = 0; i < 4; ++i) plain_nodes[i] = plain[static_cast<std::size_t>(i)];
  EXPECT_GT(distance_from(plain_nodes, average), 1.0);
  // After one round of push-sum the de-biased z differ from the mean, but the node average,
  // sum x / sum w, is the mean: a column-stochastic W keeps both sums.
  torch::Tensor after_one;
  const auto one_round = mix_only(cfg, 2, 1, start, &after_one);
  EXPECT_GT(distance_from(one_round, average), 0.1);
  EXPECT_LT((after_one - average).abs().max().item<double>(), 1e-12);
  // Push-sum on the same weights, across two ranks: x / w reaches the mean.
  const auto pushed = mix_only(cfg, 2, 100, start);
  EXPECT_LT(distance_from(pushed, average), 1e-12);
  EXPECT_EQ(max_difference(mix_only(cfg, 1, 100, start), pushed), 0.0);
  // And averaging algorithms refuse those weights by name.
  const auto dsgd = lopsided_ring("dsgd");
  const auto message = error_of([&] { make_decentralized(dsgd, decentralized_model(dsgd), nullptr); });
  EXPECT_EQ(message.rfind("parallel.graph.weights: row 0 of the directed_cycle graph's mixing matrix", 0), 0u)
      << message;
}

TEST(PushSum, SameNumbersOnAnyRanksOnDirectedGraphs) {
  for (const char* graph : {"exponential", "directed_cycle", "one_peer_exponential"}) {
    SCOPED_TRACE(graph);
    const int nodes = std::string(graph) == "one_peer_exponential" ? 4 : 6;
    const auto cfg = decentralized_config("push_sum", graph, nodes);
    const auto single = run_nodes(cfg, 1, 4);
    for (int world : {2, nodes}) {
      const auto run = run_nodes(cfg, world, 4);
      EXPECT_LT(max_difference(run.nodes, single.nodes), 1e-6) << world << " ranks";
      EXPECT_EQ(run.metrics.at("node_bytes_sent"), single.metrics.at("node_bytes_sent"));
    }
    EXPECT_GT(single.metrics.at("node_bytes_sent"), 0.0);
  }
}

TEST(PushSum, CheckpointKeepsThePushWeights) {
  auto cfg = lopsided_ring("push_sum");
  const auto straight = run_nodes(cfg, 1, 5);
  io::Checkpoint saved;
  std::mutex mutex;
  run_nodes(cfg, 2, 3, 8, [&](DecentralizedStrategy& s, int round) {
    if (round != 2) return;
    io::Checkpoint mine;
    s.save(mine);
    std::lock_guard<std::mutex> lock(mutex);
    saved = mine;
  });
  // After three rounds the weights are no longer one (node 1 holds 0.6 after the first).
  EXPECT_NE(saved.tensor("strategy/decentralized/node1/push_weight").item<double>(), 1.0);
  auto model = decentralized_model(cfg);
  auto s = make_decentralized(cfg, model, nullptr);
  s->set_learning_rate(cfg.optim.lr);
  s->load(saved);
  for (int k = 3; k < 5; ++k) s->train_step(rank_batch(s->layout(), 0, k, 1, 8));
  std::map<int, torch::Tensor> nodes;
  for (int node = 0; node < 4; ++node) nodes[node] = s->node_parameters(node);
  EXPECT_LT(max_difference(nodes, straight.nodes), 1e-6);
}

// Arcs from YAML: a directed ring with a chord both ways, whose W is column stochastic only.
TEST(PushSum, ReachesTheAverageOnADirectedEdgeListThatAveragingRefuses) {
  const auto arcs = [](const std::string& algorithm) {
    auto cfg = decentralized_config(algorithm, "edges", 4);
    cfg.parallel.options.get<GraphOptions>("graph").edges = "0->1 1->2 2->3 3->0 0-2";
    return cfg;
  };
  const auto cfg = arcs("push_sum");
  const auto start = starts(4, parameters_of(cfg));
  const auto pushed = mix_only(cfg, 2, 100, start);
  EXPECT_LT(distance_from(pushed, mean_of(start)), 1e-12);
  EXPECT_EQ(max_difference(mix_only(cfg, 1, 100, start), pushed), 0.0);
  for (const std::string algorithm : {"dsgd", "dsgt"}) {
    const auto refused = arcs(algorithm);
    const auto message =
        error_of([&] { make_decentralized(refused, decentralized_model(refused), nullptr); });
    EXPECT_EQ(message.rfind("parallel.graph.edges: row 0 of the edges graph's mixing matrix", 0), 0u)
        << message;
    EXPECT_NE(message.find(algorithm + " averages and needs doubly stochastic weights"), std::string::npos)
        << message;
  }
  const auto cadmm = arcs("cadmm");
  const auto message = error_of([&] { make_decentralized(cadmm, decentralized_model(cadmm), nullptr); });
  EXPECT_EQ(message.rfind("parallel.graph.edges: '0->1 1->2 2->3 3->0 0-2' holds arcs a->b, so the graph is "
                          "directed, but cadmm",
                          0),
            0u)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(PushSum, GraphsAnAlgorithmCannotRunOnAreRefusedByName) {
  const auto refusal = [](const std::string& algorithm, const std::string& graph,
                          const std::function<void(config::RunConfig&)>& change = {}) {
    auto cfg = decentralized_config(algorithm, graph, 4);
    if (change) change(cfg);
    return error_of([&] { make_decentralized(cfg, decentralized_model(cfg), nullptr); });
  };
  EXPECT_EQ(
      refusal("cadmm", "exponential").rfind("parallel.graph.type: exponential is directed, but cadmm", 0),
      0u);
  EXPECT_EQ(refusal("choco", "directed_cycle").rfind("parallel.graph", 0), 0u);
  EXPECT_NE(refusal("choco", "one_peer_exponential").find("choco keeps every neighbour's x_hat"),
            std::string::npos);
  EXPECT_EQ(
      refusal("local_sgd", "cycle",
              [](config::RunConfig& c) { c.parallel.options.get<GraphOptions>("graph").weights = "0-1:0.5"; })
          .rfind("parallel.graph.weights: local_sgd does not mix with graph weights", 0),
      0u);
  // A bad type in a schedule fails when the strategy is made, not at the round that uses it.
  const auto schedule = refusal("push_sum", "schedule", [](config::RunConfig& c) {
    auto& g = c.parallel.options.get<GraphOptions>("graph");
    g.nodes = 6;
    g.schedule = {"exponential", "one_peer_exponential"};
  });
  EXPECT_NE(schedule.find("one_peer_exponential averages exactly only over a power-of-two node count"),
            std::string::npos)
      << schedule;
  for (const auto& message : {refusal("cadmm", "exponential"), schedule})
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // `dtrain train --nproc` checks the same before it starts workers.
  auto cadmm = decentralized_config("cadmm", "one_peer_exponential", 4);
  EXPECT_THROW(data_holders(cadmm.parallel, 2), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel::testing
