// Asynchronous gossip with a straggler: four graph nodes on a cycle train a small classifier by
// dsgd without a round barrier, each mixing its neighbours' newest states at most `staleness`
// steps old, while the last rank sleeps after every step. The fast ranks do not wait for it; the
// neighbours it leaves behind are left out of a round and counted
// (strategy/stale_neighbours_skipped_per_round). Before the evaluation the ranks settle: every
// transfer in flight lands and every rank stands at the same step (Note [Asynchronous gossip]).
//   dtrain launch --nproc-per-node 2 -- example_async_gossip
#include <torch/torch.h>

#include <cstdio>

#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"
#include "dtrain/parallel/Strategies.h"

namespace dp = dtrain::parallel;

constexpr int kNodes = 4;

// Points around (+2, +2) are class 1, around (-2, -2) class 0; node n sees only its half-plane.
dtrain::data::Batch samples(int node, int rows, std::uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto y = torch::randint(0, 2, {rows}, generator);
  auto x = torch::randn({rows, 2}, generator) + (y.to(torch::kFloat) * 4 - 2).unsqueeze(1);
  if (node >= 0) x.select(1, node % 2).abs_().mul_(node < 2 ? 1 : -1);
  return {x, y};
}

int main() {
  auto rendezvous = dtrain::comm::resolve_rendezvous({}, dtrain::config::process_environment());
  dtrain::comm::CommunicatorPtr comm = dtrain::comm::connect(dtrain::comm::BackendOptions{}, rendezvous);
  dp::DecentralizedOptions gossip;
  gossip.algorithm = "dsgd";
  gossip.asynchronous = true;
  gossip.staleness = 4;
  gossip.delay_rank = comm->size() - 1;  // the straggler
  gossip.delay_ms = 2.0;
  dp::GraphOptions graph;
  graph.type = "cycle";
  graph.nodes = kNodes;
  torch::manual_seed(0);
  auto model = torch::nn::Sequential(torch::nn::Linear(2, 8), torch::nn::Tanh(), torch::nn::Linear(8, 2));
  auto sgd = [](std::vector<torch::Tensor> p) { return std::make_unique<torch::optim::SGD>(p, 0.1); };
  auto strategy = dp::make_decentralized(
      {dtrain::models::network("problem", model), sgd, dtrain::optim::create_loss("cross_entropy"), comm},
      gossip, graph);
  const int per_rank = kNodes / comm->size();
  for (int step = 0; step < 200; ++step) {
    std::vector<torch::Tensor> xs, ys;  // this rank's nodes' batches, node by node
    for (int node = comm->rank() * per_rank; node < (comm->rank() + 1) * per_rank; ++node) {
      const auto batch = samples(node, 32, 1000 * step + node);
      xs.push_back(batch.inputs);
      ys.push_back(batch.targets);
    }
    strategy->train_step({torch::cat(xs), torch::cat(ys)});
  }
  const auto test = samples(-1, 2000, 7);
  strategy->begin_evaluation();  // settles the gossip; model 0 is the average of the nodes
  const double accuracy = strategy->eval_forward(0, test.inputs)
                              .argmax(1)
                              .eq(test.targets)
                              .to(torch::kDouble)
                              .mean()
                              .item<double>();
  strategy->end_evaluation();
  const auto metrics = strategy->metrics();
  std::printf(
      "async dsgd: rank %d, %d nodes: test accuracy %.4f, consensus error %.3g, %.2f neighbours "
      "left out per round\n",
      comm->rank(), kNodes, accuracy, metrics.at("consensus_error"),
      metrics.count("stale_neighbours_skipped_per_round") ? metrics.at("stale_neighbours_skipped_per_round")
                                                          : 0.0);
  return accuracy > 0.95 && metrics.at("consensus_error") < 0.2 ? 0 : 1;
}
