// CADMM on a convex problem: logistic regression split over four heterogeneous nodes reaches the
// loss of the centralized optimum, and the nodes' consensus error falls as the duals converge.
#include <gtest/gtest.h>

#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel::testing {
namespace {

constexpr int kNodes = 4;
constexpr std::int64_t kRows = 64;  // per node
constexpr std::int64_t kFeatures = 5;

// Node i's samples: features around a mean of its own, labels from a noisy linear rule, so the
// pooled problem has a finite optimum and each node alone a different one.
data::Batch node_data(int node) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(101 + static_cast<std::uint64_t>(node));
  auto x = torch::randn({kRows, 1, 1, kFeatures}, gen) + 0.5 * static_cast<double>(node - 1);
  const auto w = torch::tensor({1.0, -2.0, 0.5, 0.0, 1.5}, torch::kFloat);
  const auto p = torch::sigmoid((x.view({kRows, kFeatures}) * w).sum(1) - 0.3);
  auto y = torch::bernoulli(p, gen).to(torch::kLong);
  return {x, y};
}

models::NetworkPtr logistic_model() {
  config::ModelConfig model;
  model.name = "mlp";
  model.hidden = {};
  torch::manual_seed(5);
  return models::create_model(model, models::InputSpec::image(1, 1, kFeatures, 2));
}

double pooled_loss(const std::function<torch::Tensor(const torch::Tensor&)>& forward) {
  double loss = 0;
  for (int i = 0; i < kNodes; ++i) {
    const auto d = node_data(i);
    loss += torch::nn::functional::cross_entropy(forward(d.inputs), d.targets).item<double>() / kNodes;
  }
  return loss;
}

TEST(Cadmm, LogisticRegressionReachesTheCentralizedOptimum) {
  // The optimum of the mean of the nodes' losses, by L-BFGS on all the data.
  auto central = logistic_model();
  torch::optim::LBFGS lbfgs(
      central->parameters(),
      torch::optim::LBFGSOptions(1.0).max_iter(500).tolerance_grad(1e-10).tolerance_change(1e-12));
  lbfgs.step([&] {
    lbfgs.zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (int i = 0; i < kNodes; ++i) {
      const auto d = node_data(i);
      loss = loss + torch::nn::functional::cross_entropy(central->forward(d.inputs), d.targets) / kNodes;
    }
    loss.backward();
    return loss;
  });
  const double optimum = pooled_loss([&](const torch::Tensor& x) { return central->forward(x); });

  config::RunConfig cfg;
  cfg.optim.name = "sgd";
  cfg.optim.lr = 0.2;
  cfg.optim.loss = "cross_entropy";
  cfg.parallel.strategy = "decentralized";
  auto& options = cfg.parallel.options.get<DecentralizedOptions>("decentralized");
  options.algorithm = "cadmm";
  options.rho_init = 0.5;
  options.primal_iterations = 10;
  options.persistent_primal_optimizer = true;
  auto& graph = cfg.parallel.options.get<GraphOptions>("graph");
  graph.type = "cycle";
  graph.nodes = kNodes;
  auto model = logistic_model();
  auto strategy = make_decentralized(cfg, model, nullptr);
  strategy->set_learning_rate(cfg.optim.lr);
  std::vector<torch::Tensor> xs, ys;
  for (int i = 0; i < kNodes; ++i) {
    const auto d = node_data(i);
    for (int b = 0; b < options.primal_iterations; ++b) {  // every primal step on the node's whole data
      xs.push_back(d.inputs);
      ys.push_back(d.targets);
    }
  }
  const data::Batch batch{torch::cat(xs), torch::cat(ys)};
  strategy->train_step(batch);
  const double early = strategy->metrics().at("consensus_error");
  for (int k = 1; k < 300; ++k) strategy->train_step(batch);
  const double late = strategy->metrics().at("consensus_error");
  EXPECT_LT(late, early / 10) << "consensus error from " << early << " to " << late;

  strategy->begin_evaluation();
  const double average = pooled_loss([&](const torch::Tensor& x) { return strategy->eval_forward(0, x); });
  for (int i = 0; i < kNodes; ++i) {
    const double node = pooled_loss([&](const torch::Tensor& x) { return strategy->eval_forward(1 + i, x); });
    EXPECT_LT(node - optimum, 1e-3) << "node " << i;
  }
  strategy->end_evaluation();
  EXPECT_LT(average - optimum, 1e-4) << "optimum " << optimum << ", node average " << average;
}

}  // namespace
}  // namespace dtrain::parallel::testing
