// The decentralized strategy: DSGD on a complete graph is data-parallel SGD, any number of ranks
// gives the numbers of one, Choco-SGD with the identity compressor is DSGD seen through W, CADMM
// reaches the centralized optimum of a convex problem, and checkpoints move between world sizes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/parallel/decentralized/DecentralizedNode.h"
#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

TEST(Decentralized, DsgdOnACompleteGraphIsDataParallelSgd) {
  auto cfg = decentralized_config("dsgd", "complete", 4);
  const int rounds = 5;
  const std::int64_t rows = 8;
  // The reference: one model, every node's batch in one step of plain SGD.
  auto reference = decentralized_model(cfg);
  torch::optim::SGD sgd(reference->parameters(), torch::optim::SGDOptions(cfg.optim.lr));
  const NodeLayout one(4, 1);
  for (int k = 0; k < rounds; ++k) {
    const auto batch = rank_batch(one, 0, k, 1, rows);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(batch.inputs), batch.targets).backward();
    sgd.step();
  }
  for (int world : {1, 2}) {
    const auto run = run_nodes(cfg, world, rounds, rows);
    for (const auto& p : reference->named_parameters()) {
      const double scale = p.value().abs().max().item<double>();
      EXPECT_LT((run.average.at(p.key()) - p.value()).abs().max().item<double>() / scale, 1e-5)
          << p.key() << " on " << world << " ranks";
    }
  }
}

class SameNumbersOnAnyRanks : public ::testing::TestWithParam<std::string> {};

TEST_P(SameNumbersOnAnyRanks, SixNodesOnTwoThreeAndSixRanks) {
  auto cfg = decentralized_config(GetParam(), "random", 6);
  auto& options = cfg.parallel.options.get<DecentralizedOptions>("decentralized");
  if (GetParam() == "cadmm") {
    options.primal_iterations = 2;
    options.rho_init = 0.5;
    options.rho_scaling = 1.01;
  }
  if (GetParam() == "choco") options.compressor = CompressorKind::QBit;
  if (GetParam() == "local_sgd") options.local_steps = 2;
  const auto single = run_nodes(cfg, 1, 4);
  ASSERT_EQ(single.nodes.size(), 6u);
  for (int world : {2, 3, 6}) {
    const auto run = run_nodes(cfg, world, 4);
    EXPECT_LT(max_difference(run.nodes, single.nodes), 1e-6) << world << " ranks";
    EXPECT_NEAR(run.metrics.at("consensus_error"), single.metrics.at("consensus_error"), 1e-6);
    EXPECT_EQ(run.metrics.at("node_bytes_sent"), single.metrics.at("node_bytes_sent"));
  }
  EXPECT_GT(single.metrics.at("node_bytes_sent"), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, SameNumbersOnAnyRanks,
                         ::testing::Values("dsgd", "cadmm", "dsgt", "choco", "push_sum", "local_sgd",
                                           "centralized"));

TEST(Decentralized, ChocoWithTheIdentityCompressorIsDsgdMixedOnceMore) {
  // DSGD mixes then steps: x+ = W x - lr g(W x). Choco with Q = identity and gamma = 1 steps then
  // mixes: z+ = W (z - lr g(z)). From equal starting weights z_k = W x_k, so Choco's node i is
  // sum_j W_ij (DSGD's node j), and the node averages agree.
  auto dsgd = decentralized_config("dsgd", "cycle", 5);
  auto choco = decentralized_config("choco", "cycle", 5);
  auto& options = choco.parallel.options.get<DecentralizedOptions>("decentralized");
  options.compressor = CompressorKind::Identity;
  options.consensus_step = 1.0;
  const auto a = run_nodes(dsgd, 1, 4);
  const auto b = run_nodes(choco, 1, 4);
  const auto graph = make_graph(dsgd.parallel.options.get<GraphOptions>("graph"), 5, 3);
  for (int i = 0; i < 5; ++i) {
    auto expected = a.nodes.at(i) * graph.weight(i, i);
    for (int j : graph.neighbours(i)) expected = expected + a.nodes.at(j) * graph.weight(i, j);
    EXPECT_LT((b.nodes.at(i) - expected).abs().max().item<double>(), 1e-5) << "node " << i;
  }
  for (const auto& [name, value] : a.average)
    EXPECT_LT((b.average.at(name) - value).abs().max().item<double>(), 1e-5);
}

TEST(Decentralized, CheckpointOfTwoRanksContinuesOnOneAndOnThree) {
  auto cfg = decentralized_config("cadmm", "cycle", 6);
  auto& options = cfg.parallel.options.get<DecentralizedOptions>("decentralized");
  options.persistent_primal_optimizer = true;
  options.rho_scaling = 1.05;
  cfg.optim.name = "adam";
  cfg.optim.lr = 0.01;
  const auto straight = run_nodes(cfg, 1, 5);
  io::Checkpoint saved;
  std::mutex mutex;
  run_nodes(cfg, 2, 3, 8, [&](DecentralizedStrategy& s, int round) {
    if (round != 2) return;
    io::Checkpoint mine;
    s.save(mine);
    std::lock_guard<std::mutex> lock(mutex);
    saved = mine;  // every rank's save holds every node
  });
  for (int world : {1, 3}) {
    std::vector<models::NetworkPtr> models;
    for (int r = 0; r < world; ++r) models.push_back(decentralized_model(cfg));
    std::map<int, torch::Tensor> nodes;
    auto body = [&](comm::CommunicatorPtr comm) {
      const int rank = comm ? comm->rank() : 0;
      auto s = make_decentralized(cfg, models[static_cast<std::size_t>(rank)], comm);
      s->set_learning_rate(cfg.optim.lr);
      s->load(saved);
      for (int k = 3; k < 5; ++k) s->train_step(rank_batch(s->layout(), rank, k, s->batches_per_step(), 8));
      std::lock_guard<std::mutex> lock(mutex);
      for (int node : s->layout().local(rank)) nodes[node] = s->node_parameters(node);
    };
    if (world == 1) {
      body(nullptr);
    } else {
      dtrain::testing::run_world(world, body);
    }
    EXPECT_LT(max_difference(nodes, straight.nodes), 1e-6) << world << " ranks";
  }
}

TEST(Decentralized, ConsensusErrorIsZeroAtTheStartAndTheMatrixIsSymmetric) {
  auto cfg = decentralized_config("individual", "wheel", 5);
  const auto start = run_nodes(cfg, 1, 0);
  EXPECT_EQ(start.metrics.at("consensus_error"), 0.0);
  const auto later = run_nodes(cfg, 1, 3);
  EXPECT_GT(later.metrics.at("consensus_error_min"), 0.0);
  EXPECT_GE(later.metrics.at("consensus_error_max"), later.metrics.at("consensus_error_min"));
  for (int i = 0; i < 5; ++i) {
    double mean = 0;
    for (int j = 0; j < 5; ++j) {
      if (i == j) continue;
      mean += later.metrics.at(fmt::format("distance/{}/{}", std::min(i, j), std::max(i, j))) / 4;
    }
    EXPECT_NEAR(later.metrics.at(fmt::format("consensus/node{}", i)), mean, 1e-9);
  }
  EXPECT_EQ(later.metrics.at("forward_pass_count"), 3 * 8);
  EXPECT_EQ(later.metrics.at("node_bytes_sent"), 0.0);
}

TEST(Decentralized, SettingsOfAnotherAlgorithmAndImpossibleLayoutsAreErrors) {
  auto cfg = decentralized_config("dsgd", "cycle", 4);
  cfg.parallel.options.get<DecentralizedOptions>("decentralized").rho_init = 2.0;
  EXPECT_THROW(
      {
        try {
          make_decentralized(cfg, decentralized_model(cfg), nullptr);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("parallel.decentralized.rho_init"), std::string::npos);
          throw;
        }
      },
      std::invalid_argument);
  auto dsgt = decentralized_config("dsgt", "cycle", 4);
  dsgt.optim.momentum = 0.9;
  EXPECT_THROW(make_decentralized(dsgt, decentralized_model(dsgt), nullptr), std::invalid_argument);
  auto choco = decentralized_config("choco", "cycle", 4);
  choco.parallel.options.get<GraphOptions>("graph").redraw_every = 5;
  EXPECT_THROW(make_decentralized(choco, decentralized_model(choco), nullptr), std::invalid_argument);
  auto uneven = decentralized_config("dsgd", "cycle", 5);
  EXPECT_THROW(data_holders(uneven.parallel, 2), std::invalid_argument);
  EXPECT_EQ(data_holders(uneven.parallel, 5), 5);
  uneven.parallel.options.get<GraphOptions>("graph").nodes = 0;
  EXPECT_EQ(data_holders(uneven.parallel, 3), 3);
}

// ZeRO's accounting (Strategy::memory_footprint) for graph nodes held by one rank: each node keeps its
// own parameters (4Ψ) and Adam moments (8Ψ); the gradients are those of the one model every node's
// forward and backward run through (4Ψ). Before the first step no Adam state exists yet.
TEST(Decentralized, MemoryFootprintCountsEveryNodeOnTheRank) {
  for (const std::string algorithm : {"dsgd", "individual"}) {
    SCOPED_TRACE(algorithm);
    auto cfg = decentralized_config(algorithm, "complete", 2);
    cfg.optim.name = "adam";
    cfg.optim.lr = 1e-3;
    auto model = decentralized_model(cfg);
    std::uint64_t psi = 0;
    for (const auto& p : model->parameters()) psi += static_cast<std::uint64_t>(p.numel());
    auto strategy = make_decentralized(cfg, model, nullptr);
    ASSERT_EQ(strategy->layout().local(0).size(), 2u);
    const auto before = strategy->memory_footprint();
    EXPECT_EQ(before.parameters, 2 * 4 * psi);
    EXPECT_EQ(before.optimizer_state, 0u);
    strategy->set_learning_rate(cfg.optim.lr);
    strategy->train_step(rank_batch(strategy->layout(), 0, 0, strategy->batches_per_step(), 8));
    const auto after = strategy->memory_footprint();
    EXPECT_EQ(after.parameters, 2 * 4 * psi);
    EXPECT_EQ(after.gradients, 4 * psi);
    EXPECT_EQ(after.optimizer_state, 2 * 8 * psi);
    EXPECT_EQ(after.total(), 2 * 4 * psi + 4 * psi + 2 * 8 * psi);
  }
}

}  // namespace
}  // namespace dtrain::parallel::testing
