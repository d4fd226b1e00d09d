// Asynchronous dsgd (Note [Asynchronous gossip]) through the strategy's real exchange between ranks
// as threads over gloo: each round mixes the newest state of every neighbour, against rounds
// computed by hand (which is why staleness 0 is not synchronous dsgd, except on one rank, where it
// is); a neighbour that lags is left out and its weight kept by the node; a checkpoint mid-run
// settles the ranks and the run goes on; and every setting that cannot go with it is refused by
// name in one line.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

config::RunConfig asynchronous(config::RunConfig cfg, int staleness) {
  auto& o = cfg.parallel.options.get<DecentralizedOptions>("decentralized");
  o.asynchronous = true;
  o.staleness = staleness;
  return cfg;
}

// Polls `s`'s gossip until every remote neighbour's newest state is of step `step` or later.
void wait_for_states_of(DecentralizedStrategy& s, std::int64_t step) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s.poll_gossip() < step) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no neighbour state of step " << step;
    std::this_thread::yield();
  }
}

// Why not synchronous dsgd's numbers, even with staleness 0 and no slow node: a step mixes, then
// sends, so a neighbour that starts its step t later than this node may already hold this node's
// state of step t + 1, and mixes it, being the newest (synchronous dsgd would mix step t's). So
// here two ranks take turns, which makes the states mixed certain: rank 0 runs round k once rank 1
// has run round k - 1 (it mixes rank 1's nodes at step k), rank 1 runs round k once rank 0 has run
// it (it mixes rank 0's nodes at step k + 1). Four nodes on a cycle, two per rank, float64,
// learning rate 0 so that only the mixing moves them: the rounds are computed here by hand.
TEST(AsyncGossip, EachRoundMixesTheNewestStateOfEveryNeighbour) {
  const int nodes = 4, rounds = 4;
  const auto cfg = asynchronous(decentralized_config("dsgd", "cycle", nodes), 0);
  const auto start = starts(nodes, parameters_of(cfg));
  const auto w = make_graph(cfg.parallel.options.get<GraphOptions>("graph"), nodes, 3).mixing_matrix();
  std::vector<torch::Tensor> x = start;
  const auto mix = [&](int i) {
    auto mixed = torch::zeros_like(x[0]);
    for (int j = 0; j < nodes; ++j) mixed += w[i][j] * x[static_cast<std::size_t>(j)];
    return mixed;
  };
  for (int k = 0; k < rounds; ++k) {
    auto x0 = mix(0), x1 = mix(1);
    x[0] = x0;
    x[1] = x1;
    auto x2 = mix(2), x3 = mix(3);
    x[2] = x2;
    x[3] = x3;
  }
  const auto checkpoint = starting_at(start);
  std::atomic<int> turn{0};
  std::map<int, torch::Tensor> got;
  std::map<std::string, double> metrics;
  std::mutex mutex;
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    auto model = decentralized_model(cfg);
    model->to(torch::kDouble);
    auto s = make_decentralized(cfg, model, comm);
    s->load(checkpoint);
    s->set_learning_rate(0.0);
    s->poll_gossip();  // starts the gossip: sends the states of step 0
    for (int k = 0; k < rounds; ++k) {
      const int mine = 2 * k + rank;
      while (turn.load() != mine) s->poll_gossip();
      wait_for_states_of(*s, k + rank);
      auto batch = rank_batch(s->layout(), rank, k, 1, 2);
      s->train_step({batch.inputs.to(torch::kDouble), batch.targets});
      turn = mine + 1;
    }
    const auto m = s->metrics();
    std::lock_guard<std::mutex> lock(mutex);
    for (int node : s->layout().local(rank)) got[node] = s->node_parameters(node);
    if (rank == 0) metrics = m;
  });
  std::map<int, torch::Tensor> expected;
  for (int i = 0; i < nodes; ++i) expected[i] = x[static_cast<std::size_t>(i)];
  EXPECT_LT(max_difference(got, expected), 1e-12);
  EXPECT_EQ(metrics.at("staleness_max"), 0.0);  // rank 1's neighbours are ahead: age 0
  EXPECT_EQ(metrics.at("stale_neighbours_skipped"), 0.0);
}

// Every node on one rank: all in step, read in memory, so the rounds are synchronous dsgd's.
TEST(AsyncGossip, OnOneRankItIsSynchronousDsgd) {
  const auto cfg = decentralized_config("dsgd", "cycle", 4);
  const auto synchronous = run_nodes(cfg, 1, 4);
  const auto run = run_nodes(asynchronous(cfg, 0), 1, 4);
  EXPECT_EQ(max_difference(run.nodes, synchronous.nodes), 0.0);
  EXPECT_EQ(run.metrics.at("stale_neighbours_skipped"), 0.0);
}

// A checkpoint mid-run is a meeting point: it settles every rank (nothing in flight, all at one
// step), holds that step, and the gossip starts again after it.
TEST(AsyncGossip, ACheckpointMidRunSettlesAndTheRunGoesOn) {
  const auto cfg = asynchronous(decentralized_config("dsgd", "cycle", 4), 2);
  std::mutex mutex;
  std::vector<std::int64_t> saved_rounds;
  const auto run = run_nodes(cfg, 2, 6, 8, [&](DecentralizedStrategy& s, int k) {
    if (k != 2) return;
    io::Checkpoint checkpoint;
    s.save(checkpoint);
    std::lock_guard<std::mutex> lock(mutex);
    saved_rounds.push_back(checkpoint.tensor("strategy/decentralized/round").item<std::int64_t>());
  });
  EXPECT_EQ(run.nodes.size(), 4u);
  for (const auto& [node, theta] : run.nodes) EXPECT_TRUE(torch::isfinite(theta).all().item<bool>()) << node;
  EXPECT_EQ(saved_rounds, (std::vector<std::int64_t>{3, 3}));
}

// Two nodes on two ranks, learning rate 0 so that only mixing moves them. Rank 0 stops after its
// first round until rank 1 has run every round; rank 1 waits once, for rank 0's state of step 1,
// and from then on hears nothing new: with staleness 0 its node is left alone, with all its weight.
TEST(AsyncGossip, ALaggingNeighbourIsLeftOutAndItsWeightStaysWithTheNode) {
  const int rounds = 6;
  auto cfg = asynchronous(decentralized_config("dsgd", "complete", 2), 0);
  const auto checkpoint = starting_at(starts(2, parameters_of(cfg)));
  std::atomic<bool> rank1_done{false};
  torch::Tensor after_first, after_last;
  std::map<std::string, double> metrics;
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    auto model = decentralized_model(cfg);
    model->to(torch::kDouble);
    auto s = make_decentralized(cfg, model, comm);
    s->load(checkpoint);
    s->set_learning_rate(0.0);
    const auto step = [&](int k) {
      auto batch = rank_batch(s->layout(), rank, k, 1, 2);
      s->train_step({batch.inputs.to(torch::kDouble), batch.targets});
    };
    step(0);
    if (rank == 0) {
      while (!rank1_done.load()) s->poll_gossip();  // owed sends go out; no round runs
      for (int k = 1; k < rounds; ++k) step(k);
    } else {
      wait_for_states_of(*s, 1);
      step(1);
      after_first = s->node_parameters(1);
      for (int k = 2; k < rounds; ++k) step(k);
      after_last = s->node_parameters(1);
      rank1_done = true;
    }
    const auto m = s->metrics();  // settles both ranks
    if (rank == 0) metrics = m;
  });
  EXPECT_TRUE(torch::equal(after_first, after_last))
      << "a left-out neighbour's weight must stay with the node";
  EXPECT_GE(metrics.at("stale_neighbours_skipped"), rounds - 2.0);
  EXPECT_EQ(metrics.at("staleness_max"), 0.0);
}

TEST(AsyncGossip, WhatCannotGossipAsynchronouslyIsRefusedByName) {
  const auto message_of = [](config::RunConfig cfg) {
    return error_of([&] { make_decentralized(cfg, decentralized_model(cfg), nullptr); });
  };
  std::vector<std::string> messages;
  for (const char* algorithm :
       {"cadmm", "dsgt", "choco", "push_sum", "local_sgd", "centralized", "individual"}) {
    const auto graph = std::string(algorithm) == "push_sum" ? "directed_cycle" : "cycle";
    const auto m = message_of(asynchronous(decentralized_config(algorithm, graph, 4), 2));
    EXPECT_EQ(m.rfind(std::string("parallel.decentralized.asynchronous: algorithm ") + algorithm +
                          " cannot gossip asynchronously",
                      0),
              0u)
        << m;
    messages.push_back(m);
  }
  auto stale = decentralized_config("dsgd", "cycle", 4);
  stale.parallel.options.get<DecentralizedOptions>("decentralized").staleness = 3;
  messages.push_back(message_of(stale));
  EXPECT_EQ(messages.back().rfind("parallel.decentralized.staleness: a setting of asynchronous gossip", 0),
            0u)
      << messages.back();
  auto hierarchical = asynchronous(decentralized_config("dsgd", "cycle", 4), 2);
  hierarchical.parallel.options.get<DecentralizedOptions>("decentralized").hierarchical = true;
  messages.push_back(message_of(hierarchical));
  EXPECT_EQ(messages.back().rfind("parallel.decentralized.asynchronous: hierarchical gossip", 0), 0u)
      << messages.back();
  auto combine = asynchronous(decentralized_config("dsgd", "cycle", 4), 2);
  combine.parallel.options.get<DecentralizedOptions>("decentralized").adapt_with_combine = true;
  messages.push_back(message_of(combine));
  EXPECT_EQ(messages.back().rfind("parallel.decentralized.asynchronous: adapt_with_combine", 0), 0u)
      << messages.back();
  auto varying = asynchronous(decentralized_config("dsgd", "cycle", 4), 2);
  varying.parallel.options.get<GraphOptions>("graph").redraw_every = 1;
  varying.parallel.options.get<GraphOptions>("graph").type = "random";
  varying.parallel.options.get<GraphOptions>("graph").p = 0.5;
  messages.push_back(message_of(varying));
  EXPECT_EQ(
      messages.back().rfind("parallel.decentralized.asynchronous: keeps each neighbour's newest state", 0),
      0u)
      << messages.back();
  messages.push_back(error_of([] {
    const auto cfg = asynchronous(decentralized_config("dsgd", "cycle", 4), 2);
    StrategyContext context{decentralized_model(cfg), optim::optimizer_factory(cfg.optim),
                            optim::create_loss(cfg.optim.loss), nullptr, cfg.parallel};
    context.precision = optim::Precision::Fp16;
    DecentralizedStrategy strategy(std::move(context));
  }));
  EXPECT_EQ(messages.back().rfind("parallel.decentralized.asynchronous: fp16 agrees on skipping a step", 0),
            0u)
      << messages.back();
  auto straggler = decentralized_config("dsgd", "cycle", 4);
  straggler.parallel.options.get<DecentralizedOptions>("decentralized").delay_rank = 0;
  messages.push_back(message_of(straggler));
  EXPECT_EQ(
      messages.back().rfind("parallel.decentralized.delay_rank: names a straggler, but delay_ms is 0", 0), 0u)
      << messages.back();
  straggler.parallel.options.get<DecentralizedOptions>("decentralized").delay_ms = 5.0;
  straggler.parallel.options.get<DecentralizedOptions>("decentralized").delay_rank = 1;
  messages.push_back(message_of(straggler));
  EXPECT_EQ(
      messages.back().rfind("parallel.decentralized.delay_rank: 1 is not a rank of this run of 1 ranks", 0),
      0u)
      << messages.back();
  for (const auto& m : messages) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

}  // namespace
}  // namespace dtrain::parallel::testing
