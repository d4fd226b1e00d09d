// Gradient tracking (dsgt) on graphs that change between rounds (Nedić, Olshevsky and Shi 2017,
// "Achieving geometric convergence for distributed optimization over time-varying graphs"): with
// every round's W doubly stochastic, the trackers' mean is the mean of the nodes' latest gradients
// after every round, and on a least-squares problem whose nodes' optima differ, dsgt with a
// constant step reaches the optimum of the sum where dsgd stops a step-sized distance from it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <mutex>

#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

// The graphs that change every round: BlueFog's one-peer exponential graph, a schedule of a
// directed and an undirected type, and an Erdős–Rényi graph drawn anew every round.
config::RunConfig time_varying(const std::string& algorithm, const std::string& kind, int nodes) {
  auto cfg = decentralized_config(algorithm, kind, nodes);
  auto& g = cfg.parallel.options.get<GraphOptions>("graph");
  if (kind == "schedule") g.schedule = {"exponential", "cycle", "star"};
  if (kind == "random") g.redraw_every = 1;
  return cfg;
}

TEST(GradientTracking, TrackersAverageTheLatestGradientsOnTimeVaryingGraphs) {
  for (const std::string kind : {"one_peer_exponential", "schedule", "random"}) {
    for (const int world : {1, 2}) {
      SCOPED_TRACE(kind + " on " + std::to_string(world) + " ranks");
      auto cfg = time_varying("dsgt", kind, 8);
      cfg.parallel.options.get<DecentralizedOptions>("decentralized").init_grads = true;
      std::vector<models::NetworkPtr> models;
      for (int r = 0; r < world; ++r) {
        models.push_back(decentralized_model(cfg));
        models.back()->to(torch::kDouble);
      }
      std::vector<io::Checkpoint> rounds(6);
      std::mutex mutex;
      auto body = [&](comm::CommunicatorPtr comm) {
        const int rank = comm ? comm->rank() : 0;
        auto s = make_decentralized(cfg, models[static_cast<std::size_t>(rank)], comm);
        s->set_learning_rate(0.05);
        for (std::size_t k = 0; k < rounds.size(); ++k) {
          const auto batch = rank_batch(s->layout(), rank, static_cast<std::int64_t>(k), 1, 4);
          s->train_step({batch.inputs.to(torch::kDouble), batch.targets});
          io::Checkpoint mine;
          s->save(mine);
          std::lock_guard<std::mutex> lock(mutex);
          if (rank == 0) rounds[k] = mine;
        }
      };
      if (world == 1) {
        body(nullptr);
      } else {
        dtrain::testing::run_world(world, body);
      }
      for (std::size_t k = 0; k < rounds.size(); ++k) {
        std::vector<torch::Tensor> trackers, gradients;
        for (int i = 0; i < 8; ++i) {
          const auto prefix = "strategy/decentralized/node" + std::to_string(i) + "/";
          trackers.push_back(rounds[k].tensor(prefix + "tracker"));
          gradients.push_back(rounds[k].tensor(prefix + "last_gradient"));
        }
        const auto tracked = torch::stack(trackers).mean(0), gradient = torch::stack(gradients).mean(0);
        // The gradients differ per node and change every round; their mean stays what is tracked.
        EXPECT_GT((trackers[0] - tracked).abs().max().item<double>(), 1e-3) << "round " << k;
        EXPECT_LT((tracked - gradient).abs().max().item<double>(), 1e-13) << "round " << k;
      }
    }
  }
}

constexpr int kNodes = 8;
constexpr std::int64_t kRows = 16;  // per node
constexpr std::int64_t kFeatures = 4;

// Node i's least-squares problem: features around a mean of its own and targets from a linear
// rule of its own, so every node alone has a different optimum.
data::Batch node_problem(int node) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(211 + static_cast<std::uint64_t>(node));
  auto a = torch::randn({kRows, 1, 1, kFeatures}, gen, torch::kDouble) + 0.3 * (node % 3);
  auto w = torch::randn({kFeatures}, gen, torch::kDouble) + static_cast<double>(node) / 4.0;
  auto b = (a.view({kRows, kFeatures}) * w).sum(1, /*keepdim=*/true) +
           0.1 * torch::randn({kRows, 1}, gen, torch::kDouble);
  return {a, b};
}

models::NetworkPtr linear_model() {
  config::ModelConfig model;
  model.name = "mlp";
  model.hidden = {};
  torch::manual_seed(5);
  auto net = models::create_model(model, models::InputSpec::image(1, 1, kFeatures, 1));
  net->to(torch::kDouble);
  return net;
}

// The minimiser of the sum of the nodes' mean squared errors, (weight, bias), by least squares on
// all the rows (every node has as many).
torch::Tensor optimum_of_the_sum() {
  std::vector<torch::Tensor> as, bs;
  for (int i = 0; i < kNodes; ++i) {
    const auto d = node_problem(i);
    as.push_back(torch::cat({d.inputs.view({kRows, kFeatures}), torch::ones({kRows, 1}, torch::kDouble)}, 1));
    bs.push_back(d.targets);
  }
  return std::get<0>(torch::linalg_lstsq(torch::cat(as), torch::cat(bs))).view({-1});
}

// The largest distance of any node's (weight, bias) from the optimum after `rounds` rounds of the
// same full batches, each node on its own problem, at a constant step.
double distance_after(const std::string& algorithm, const std::string& kind, int rounds) {
  auto cfg = time_varying(algorithm, kind, kNodes);
  cfg.optim.loss = "mse";
  auto strategy = make_decentralized(cfg, linear_model(), nullptr);
  strategy->set_learning_rate(0.05);
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < kNodes; ++i) {
    const auto d = node_problem(i);
    xs.push_back(d.inputs);
    ys.push_back(d.targets);
  }
  const data::Batch batch{torch::cat(xs), torch::cat(ys)};
  for (int k = 0; k < rounds; ++k) strategy->train_step(batch);
  const auto optimum = optimum_of_the_sum();
  double worst = 0.0;
  for (int i = 0; i < kNodes; ++i) {
    // theta is the parameters in order: the weight (1, features), then the bias.
    worst = std::max(worst, (strategy->node_parameters(i) - optimum).abs().max().item<double>());
  }
  return worst;
}

TEST(GradientTracking, ReachesTheOptimumOfTheSumOnTimeVaryingGraphsWhereDsgdDoesNot) {
  for (const std::string kind : {"one_peer_exponential", "schedule", "random"}) {
    SCOPED_TRACE(kind);
    const double dsgt = distance_after("dsgt", kind, 600);
    const double dsgd = distance_after("dsgd", kind, 600);
    RecordProperty(kind + "_dsgt", fmt::format("{:.3g}", dsgt));
    RecordProperty(kind + "_dsgd", fmt::format("{:.3g}", dsgd));
    EXPECT_LT(dsgt, 1e-9);
    EXPECT_GT(dsgd, 1e-2);
  }
}

}  // namespace
}  // namespace dtrain::parallel::testing
