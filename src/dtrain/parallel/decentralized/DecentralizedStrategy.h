// parallel.strategy: decentralized — one model per graph node, each trained on its own data, nodes
// talking only to their graph neighbours (DiNNO). The nodes are spread over the ranks in
// equal contiguous shares (NodeLayout); a rank keeps every node's parameters as one flat vector
// and runs its nodes one after another through the one model it built, whose parameters it points
// at the node's vector (set_data) — so a node costs its parameters and optimizer state, not a
// module. A step is one communication round of parallel.decentralized.algorithm: every node reads
// its neighbours' values of round k (never half-updated ones: all messages of a round are taken
// before any node changes), which is where this differs from the authors' code, which updates the
// nodes of one process in place one after another.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/parallel/MixedPrecision.h"
#include "dtrain/parallel/Strategy.h"
#include "dtrain/parallel/decentralized/AsyncExchange.h"
#include "dtrain/parallel/decentralized/Compressor.h"
#include "dtrain/parallel/decentralized/DecentralizedOptions.h"
#include "dtrain/parallel/decentralized/Graph.h"
#include "dtrain/parallel/decentralized/HostHierarchy.h"
#include "dtrain/parallel/decentralized/NodeExchange.h"
#include "dtrain/parallel/decentralized/NodeLayout.h"

namespace dtrain::parallel {

class DecentralizedStrategy final : public Strategy {
 public:
  explicit DecentralizedStrategy(StrategyContext context);
  ~DecentralizedStrategy() override;

  std::string name() const override { return "decentralized"; }
  StepResult train_step(const data::Batch& batch) override;
  void set_learning_rate(double lr) override;
  int batches_per_step() const override;

  std::vector<EvalModel> eval_models() const override;
  void begin_evaluation() override;
  torch::Tensor eval_forward(std::size_t model, const torch::Tensor& inputs) override;
  void end_evaluation() override;

  std::map<std::string, torch::Tensor> model_state() const override;
  void save(io::Checkpoint& checkpoint) const override;
  void load(const io::Checkpoint& checkpoint) override;
  std::map<std::string, double> metrics() override;
  std::map<std::string, std::string> notes() const override;
  // Every node this rank hosts: its parameters, its optimizer's state and its algorithm's vectors
  // (counted as optimizer state); the model's gradients once (the nodes share them in turn).
  MemoryFootprint memory_footprint() const override;

  // For tests: graph node `node`'s parameters as one vector (only on the rank hosting it).
  torch::Tensor node_parameters(int node) const;
  const Graph& graph() const { return *graph_; }
  // For tests, asynchronous gossip between rounds: starts it if need be, takes the messages that
  // have arrived (sending what is owed) and
  // returns the oldest step among the newest states of this rank's nodes' remote in-neighbours.
  std::int64_t poll_gossip();
  const NodeLayout& layout() const { return layout_; }

  struct Node;  // one graph node's state (DecentralizedNode.h)

 private:
  // Points the model at `node`'s parameters and buffers.
  void bind(Node& node);
  // Forward and backward of the bound model on (inputs, targets) under train.precision; returns
  // the detached outputs and adds the (unscaled) loss to `loss_sum`; the gradients are in the
  // model's parameters, multiplied by precision_.loss_scale() in fp16.
  torch::Tensor forward_backward(Node& node, const torch::Tensor& inputs, const torch::Tensor& targets,
                                 double& loss_sum, StepTiming& timing);
  // The model's gradients as one vector (after forward_backward).
  torch::Tensor flat_gradient() const;
  void add_to_gradient(const torch::Tensor& flat);
  // fp16 (see Note [fp16 in decentralized rounds]): every rank's nodes have their gradients,
  // `overflow` says whether any of this rank's held an inf/NaN; agrees over ranks (timed and
  // counted as communication) and returns whether the round's nodes step. True without fp16.
  bool agree_on_step(bool overflow, StepTiming& timing);
  void zero_gradients();
  // Runs `op` (this strategy's communication), timed into timing->communication and counted as
  // its own traffic; with no timing (evaluation, checkpoints) neither.
  void communicate(StepTiming* timing, const std::function<void()>& op);
  // Gossip of per-node messages, timed as communication, bytes counted as this strategy's.
  std::map<int, torch::Tensor> gossip(const std::vector<torch::Tensor>& messages, StepTiming& timing);
  // Hierarchical gossip (Note [Hierarchical gossip]) of per-node messages: the mean of the host's
  // nodes' messages mixed with the other hosts' on the host graph; every rank of a host gets it.
  torch::Tensor host_gossip(const std::vector<torch::Tensor>& messages, StepTiming& timing);
  // The nodes of parallel.graph: the graph nodes, or the hosts under hierarchical gossip.
  int gossip_nodes() const { return hierarchy_ ? hierarchy_->hosts() : layout_.nodes(); }
  // Sum over every node of the local nodes' `value(node)` (an all-reduce across ranks).
  torch::Tensor sum_over_nodes(const std::function<torch::Tensor(const Node&)>& value, StepTiming* timing);
  void start_round();

  // The algorithms' rounds (DecentralizedAlgorithms.cpp). Each returns the outputs for batch rows
  // in order and leaves the mean loss in `loss`.
  torch::Tensor round_dsgd(const data::Batch& batch, double& loss, StepTiming& timing);
  // dsgd and push_sum with the exchange in flight beside the gradients (Note [Adapt with combine]).
  torch::Tensor round_awc(const data::Batch& batch, double& loss, StepTiming& timing);
  torch::Tensor round_dsgd_async(const data::Batch& batch, double& loss, StepTiming& timing);
  // Asynchronous gossip: ends every transfer in flight (AsyncExchange::settle) before a collective.
  void settle_gossip();
  std::vector<torch::Tensor> node_states() const;
  torch::Tensor round_cadmm(const data::Batch& batch, double& loss, StepTiming& timing);
  torch::Tensor round_dsgt(const data::Batch& batch, double& loss, StepTiming& timing);
  torch::Tensor round_choco(const data::Batch& batch, double& loss, StepTiming& timing);
  torch::Tensor round_push_sum(const data::Batch& batch, double& loss, StepTiming& timing);
  torch::Tensor round_local(const data::Batch& batch, double& loss, StepTiming& timing);
  torch::Tensor round_centralized(const data::Batch& batch, double& loss, StepTiming& timing);
  void average_all_nodes(StepTiming& timing);
  // The nodes' consensus point: their mean, or push-sum's sum_i w_i z_i / sum_i w_i (collective).
  torch::Tensor node_average(StepTiming* timing);
  // The message and in-memory mixing: sum_j W_ij v_j over i's in-neighbours and itself.
  torch::Tensor mix(int node, const std::map<int, torch::Tensor>& values) const;
  std::unique_ptr<torch::optim::Optimizer> make_node_optimizer();
  std::unique_ptr<Node> make_node(int index);
  void charge_bytes(double bytes_per_neighbour);

  StrategyContext context_;
  DecentralizedOptions options_;
  GraphOptions graph_options_;
  NodeLayout layout_;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<NodeExchange> exchange_;    // between hosts' leaders under hierarchical gossip
  std::unique_ptr<HostHierarchy> hierarchy_;  // hierarchical gossip only
  std::unique_ptr<Compressor> compressor_;
  std::vector<std::unique_ptr<Node>> nodes_;  // this rank's, in layout order
  std::unique_ptr<Node> average_;             // the node average, during evaluation
  std::vector<torch::Tensor> model_params_;   // the model's parameters, in order
  std::vector<torch::Tensor> model_buffers_;
  std::vector<std::string> param_names_, buffer_names_;
  std::int64_t length_ = 0;  // parameters per node
  std::int64_t round_ = 0;   // rounds done
  double lr_ = 0.0;
  double rho_ = 0.0;
  // Choco: x_hat of every node this rank's nodes neighbour or host. local_sgd + nesterov: the
  // outer iterate and momentum.
  std::map<int, torch::Tensor> xhat_;
  torch::Tensor outer_, outer_momentum_;
  MixedPrecision precision_;
  // Adapt-with-combine: seconds the exchange was in flight, and of those, seconds the nodes
  // computed gradients meanwhile; the last round's and all rounds' (Note [Adapt with combine]).
  double exchange_seconds_ = 0.0, overlap_seconds_ = 0.0;
  double last_exchange_seconds_ = 0.0, last_overlap_seconds_ = 0.0;
  // Asynchronous gossip (Note [Asynchronous gossip]) and what its mixes used since the last
  // metrics(): the summed and largest age of the remote neighbour states mixed, how many were
  // mixed and left out, and the node rounds.
  std::unique_ptr<AsyncExchange> async_;
  struct Staleness {
    double age_sum = 0.0, age_max = 0.0, mixed = 0.0, skipped = 0.0, node_rounds = 0.0;
  } staleness_;
};

}  // namespace dtrain::parallel
