// Hierarchical gossip (Note [Hierarchical gossip]) through the strategy's real communicators,
// threads over gloo: on a complete graph of hosts it averages as flat gossip on the complete graph
// of nodes does; on a cycle of four hosts each host takes the Metropolis mix of the host means;
// training with it gives the numbers flat complete-graph dsgd gives; push-sum over hosts keeps
// the true average on a lopsided directed ring; and what cannot be hierarchical is refused by name.
#include <gtest/gtest.h>

#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

config::RunConfig hierarchical(config::RunConfig cfg, int ranks_per_host) {
  auto& options = cfg.parallel.options.get<DecentralizedOptions>("decentralized");
  options.hierarchical = true;
  options.ranks_per_host = ranks_per_host;
  return cfg;
}

TEST(HierarchicalGossip, CompleteGraphOfHostsAveragesAsTheFlatCompleteGraph) {
  // Four ranks in two hosts of two; one node per rank, then two.
  for (const int nodes : {4, 8}) {
    SCOPED_TRACE(std::to_string(nodes) + " nodes");
    const auto flat = decentralized_config("dsgd", "complete", nodes);
    const auto start = starts(nodes, parameters_of(flat));
    const auto average = mean_of(start);
    const auto once = mix_only(flat, 4, 1, start);
    EXPECT_LT(distance_from(once, average), 1e-12);
    const auto hosts = mix_only(hierarchical(flat, 2), 4, 1, start);
    EXPECT_LT(distance_from(hosts, average), 1e-12);
    EXPECT_LT(max_difference(hosts, once), 1e-12);
  }
}

TEST(HierarchicalGossip, CycleOfHostsMixesTheHostMeans) {
  // Eight ranks in four hosts of two, two nodes per rank: host h holds nodes 4h..4h+3, and a cycle
  // of four hosts gives each the Metropolis weight 1/3 on itself and its two neighbours.
  const auto cfg = hierarchical(decentralized_config("dsgd", "cycle", 16), 2);
  const auto start = starts(16, parameters_of(cfg));
  std::vector<torch::Tensor> host_mean;
  for (int h = 0; h < 4; ++h) {
    host_mean.push_back(
        torch::stack({start[4 * h], start[4 * h + 1], start[4 * h + 2], start[4 * h + 3]}).mean(0));
  }
  const auto nodes = mix_only(cfg, 8, 1, start);
  ASSERT_EQ(nodes.size(), 16u);
  for (const auto& [node, theta] : nodes) {
    const int h = node / 4;
    const auto expected = (host_mean[(h + 3) % 4] + host_mean[h] + host_mean[(h + 1) % 4]) / 3.0;
    EXPECT_LT((theta - expected).abs().max().item<double>(), 1e-12) << "node " << node;
  }
  // Not yet the mean of all nodes: a cycle of four needs more than one round.
  EXPECT_GT(distance_from(nodes, mean_of(start)), 0.01);
}

TEST(HierarchicalGossip, DsgdOnACompleteGraphOfHostsTrainsAsFlatCompleteDsgd) {
  // Mixing on a complete graph is the mean either way, so every round's step starts from the same
  // point and the trajectories agree up to the order of float32 sums.
  const auto flat = decentralized_config("dsgd", "complete", 4);
  const auto one = run_nodes(flat, 4, 4);
  const auto hosts = run_nodes(hierarchical(flat, 2), 4, 4);
  EXPECT_LT(max_difference(hosts.nodes, one.nodes), 1e-5);
  // The nodes moved: a test of trajectories that never left the start would pass trivially.
  const auto still = run_nodes(decentralized_config("individual", "complete", 4), 1, 0);
  EXPECT_GT(max_difference(hosts.nodes, still.nodes), 1e-3);
  EXPECT_GT(hosts.metrics.at("node_bytes_sent"), 0.0);
}

TEST(HierarchicalGossip, PushSumOverHostsReachesTheTrueAverageOnALopsidedDirectedRing) {
  // Four hosts of one rank, two nodes each, on a directed ring where host 0 keeps 0.9 of its value:
  // column stochastic only, so push-sum's de-biasing is what brings every node to the mean.
  auto cfg = hierarchical(decentralized_config("push_sum", "directed_cycle", 8), 1);
  cfg.parallel.options.get<GraphOptions>("graph").weights = "0-1:0.1";
  const auto start = starts(8, parameters_of(cfg));
  const auto nodes = mix_only(cfg, 4, 100, start);
  EXPECT_LT(distance_from(nodes, mean_of(start)), 1e-10);
}

TEST(HierarchicalGossip, WhatCannotBeHierarchicalIsRefusedByName) {
  const auto refusal = [](config::RunConfig cfg, int world) {
    std::string message;
    std::mutex mutex;
    dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
      const auto error = error_of([&] { make_decentralized(cfg, decentralized_model(cfg), comm); });
      std::lock_guard<std::mutex> lock(mutex);
      if (message.empty()) message = error;
    });
    return message;
  };
  const auto uneven = refusal(hierarchical(decentralized_config("dsgd", "cycle", 6), 4), 6);
  EXPECT_EQ(
      uneven.rfind("parallel.decentralized.ranks_per_host: 4 ranks per host do not divide the 6 ranks", 0),
      0u)
      << uneven;
  for (const std::string algorithm : {"cadmm", "dsgt", "choco", "local_sgd", "centralized", "individual"}) {
    const auto message = error_of([&] {
      hierarchical(decentralized_config(algorithm, "cycle", 4), 1)
          .parallel.options.get<DecentralizedOptions>("decentralized")
          .check();
    });
    EXPECT_EQ(
        message.rfind("parallel.decentralized.hierarchical: algorithm " + algorithm + " cannot gossip", 0),
        0u)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  auto stray = decentralized_config("dsgd", "cycle", 4);
  stray.parallel.options.get<DecentralizedOptions>("decentralized").ranks_per_host = 2;
  EXPECT_EQ(error_of([&] {
              make_decentralized(stray, decentralized_model(stray), nullptr);
            }).rfind("parallel.decentralized.ranks_per_host: a setting of hierarchical gossip", 0),
            0u);
  // No launcher said how many ranks share a host, and ranks_per_host is left at 0.
  EXPECT_EQ(
      refusal(hierarchical(decentralized_config("dsgd", "cycle", 2), 0), 2)
          .rfind("parallel.decentralized.hierarchical: no launcher said how many ranks share a host", 0),
      0u);
  // `dtrain train --nproc` checks the hosts before it starts workers.
  EXPECT_THROW(data_holders(hierarchical(decentralized_config("dsgd", "cycle", 6), 4).parallel, 6),
               std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel::testing
