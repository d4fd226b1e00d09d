// One round of each decentralized algorithm. Notation: node i, neighbours N(i), Metropolis weights
// W (Graph::weight), round k; every value a node reads from a neighbour is that neighbour's value
// at the start of the round's exchange. Sources and what we do differently:
//   dsgd   DiNNO's optimizers/dsgd.py: x_i <- sum_j W_ij x_j (j in N(i) and i), then a step of the
//          configured optimizer on a batch at the mixed point. The original mixes the nodes of its
//          one process in place, so node i reads neighbours already mixed this round; we read round k.
//   cadmm  DiNNO's optimizers/dinno.py: rho <- rho * rho_scaling; p_i <- p_i + rho sum_j (x_i - x_j);
//          then primal_iterations optimizer steps on f_i(x) + x.p_i + rho sum_j |x - (x_i + x_j)/2|^2,
//          each on a new batch. The regulariser's gradient p_i + 2 rho sum_j (x - (x_i + x_j)/2) is
//          added to the loss's instead of differentiating torch.cdist: the same gradient.
//   dsgt   DiNNO's optimizers/dsgt.py: x_i <- sum_j W_ij (x_j - lr y_j); y_i <- sum_j W_ij y_j +
//          g_i(x_i new) - g_i(old); with init_grads, y_i = g_i = a gradient at the initial weights,
//          taken on the first round's batch (the original draws one more batch for it).
//   choco  Koloskova et al. 2019, Algorithm 2 (CHOCO-SGD): x_i <- step; q_i = Q(x_i - xhat_i);
//          xhat_j += q_j for j in N(i) and i; x_i += gamma sum_j W_ij (xhat_j - xhat_i).
//   push_sum  Assran et al. 2019 (SGP), Algorithm 1, as BlueFog's DistributedPushSumOptimizer: a step
//          of optim.* at z_i = x_i / w_i; then node i sends W_ji (w_i z_i, w_i) to each out-neighbour j
//          and keeps W_ii of it; x_i <- sum_j W_ij x_j, w_i <- sum_j W_ij w_j. W need only be column
//          stochastic (directed, time-varying graphs). See Note [Push-sum in rounds].
//   local_sgd  Stich 2019 / Lin et al. 2020: local optimizer steps, every local_steps rounds the
//          average of all nodes; DiLoCo (Douillard et al. 2023) optionally treats the change of the
//          average as an outer gradient for Nesterov momentum (outer_lr, outer_momentum).
//   centralized  one model; every node's batch in one step, gradients averaged over ranks.
//   individual   every node steps alone.
//
// Note [fp16 in decentralized rounds]
// With train.precision: fp16 a node's optimizer step may only be taken once every rank knows that
// no node anywhere overflowed (the skip is agreed, as in every strategy). So a round computes all
// of this rank's nodes' gradients first (each kept as a flat vector, since the nodes share one
// model), agrees once (agree_on_step), and then steps every node with its unscaled gradient, or
// none; the gossip of the round happens either way. CADMM, whose primal iterations step a node
// several times in a row, agrees after each (every rank hosts as many nodes, so the agreements
// line up); DSGT, which steps by its tracker, leaves tracker and last gradient as they were on a
// skipped round (at round 0 with init_grads an overflow starts them at zero, as without).
#include <torch/torch.h>

#include <algorithm>
#include <optional>

#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/decentralized/DecentralizedNode.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {
namespace {

// Batch b of local node h when every node has `per_node` batches of `rows` rows in a row.
torch::Tensor rows_of(const torch::Tensor& t, std::size_t h, int b, int per_node, std::int64_t rows) {
  return t.narrow(0, (static_cast<std::int64_t>(h) * per_node + b) * rows, rows);
}

// Each node's message: f(node). A message that aliases state the round changes while others still
// read it (CADMM's parameters, stepped node by node) must be a copy; the exchange itself copies only
// what it sends to other ranks.
std::vector<torch::Tensor> messages_of(
    const std::vector<std::unique_ptr<DecentralizedStrategy::Node>>& nodes,
    const std::function<torch::Tensor(const DecentralizedStrategy::Node&)>& f) {
  std::vector<torch::Tensor> out;
  for (const auto& node : nodes) out.push_back(f(*node));
  return out;
}

}  // namespace

torch::Tensor DecentralizedStrategy::round_dsgd(const data::Batch& batch, double& loss, StepTiming& timing) {
  {
    torch::NoGradGuard no_grad;
    const auto messages = messages_of(nodes_, [](const Node& n) { return n.theta; });
    // Every mix is taken before any node's parameters change, so the parameters themselves serve.
    std::vector<torch::Tensor> mixed;
    if (hierarchy_) {
      mixed.assign(nodes_.size(), host_gossip(messages, timing));
    } else {
      const auto values = gossip(messages, timing);
      charge_bytes(4.0 * static_cast<double>(length_));
      for (const auto& node : nodes_) mixed.push_back(mix(node->index, values));
    }
    for (std::size_t h = 0; h < nodes_.size(); ++h) nodes_[h]->theta.copy_(mixed[h]);
  }
  return round_local(batch, loss, timing);
}

// Note [Adapt with combine]
// dsgd mixes first and takes its gradient at the mixed point (x <- W x, then a step), so the
// exchange must finish before any gradient starts. Adapt-with-combine (BlueFog's
// DistributedAdaptWithCombineOptimizer, which overlaps its neighbour_allreduce with the backward)
// takes each node's gradient at its own round-t parameters: x_i <- sum_j W_ij x_j - lr g_i(x_i),
// every x of round t. So a round posts the exchange of the nodes' parameters (NodeExchange::post,
// which reads them in place: nothing changes them until it finishes), computes every node's
// gradient meanwhile, waits, mixes, and steps the optimizer from the mixed point with the kept
// gradient (plain SGD: exactly the form above). Push-sum combines so as well: its message
// (w_i z_i, w_i) of round t is in flight while each node's gradient is taken at its own z_i, then
// z_i <- sum_j W_ij x_j / sum_j W_ij w_j and the step from there with the kept gradient; with plain
// SGD x_i <- sum_j W_ij x_j - lr w_i' g_i(z_i), w_i' the new weight, the weighting SGP's own step
// gives a gradient (it sends w_i (z_i - lr g_i)). A column-stochastic W keeps sum w, and on a doubly
// stochastic one every w stays 1 and the rounds are dsgd's. The overlap, reported as
// strategy/exchange_overlap, is the time the exchange was in flight while this rank computed
// over the time it was in flight, from post to the first check that found it done: checks run
// after each node's gradient and in the wait, so the figure is exact to one node's gradient. A
// round with nothing to send to other ranks (one rank) has no exchange in flight and adds nothing.
torch::Tensor DecentralizedStrategy::round_awc(const data::Batch& batch, double& loss, StepTiming& timing) {
  const bool push = options_.algorithm == "push_sum";
  const auto before = context_.comm ? context_.comm->stats() : comm::CommStats{};
  const auto posted = util::Clock::now();
  // Kept until finish(): the exchange reads them in place.
  const auto messages = messages_of(nodes_, [push](const Node& n) {
    return push ? torch::cat({n.theta * n.push_weight, n.push_weight}) : n.theta;
  });
  auto pending = exchange_->post(messages);
  charge_bytes(4.0 * static_cast<double>(length_ + (push ? 1 : 0)));
  const bool remote = !pending.works.empty();
  std::optional<util::Clock::time_point> done;
  const auto rows = batch.size() / static_cast<std::int64_t>(nodes_.size());
  std::vector<torch::Tensor> outputs, gradients;
  for (std::size_t h = 0; h < nodes_.size(); ++h) {
    auto& node = *nodes_[h];
    outputs.push_back(forward_backward(node, rows_of(batch.inputs, h, 0, 1, rows),
                                       rows_of(batch.targets, h, 0, 1, rows), loss, timing));
    gradients.push_back(flat_gradient().clone());
    if (remote && !done && pending.done()) done = util::Clock::now();
  }
  const auto computed = util::Clock::now();
  const auto values = exchange_->finish(pending);
  const auto finished = util::Clock::now();
  if (context_.comm) {
    timing.communication += util::seconds_since(computed);
    count_own_communication(context_.comm, before);
  }
  if (remote) {
    const auto end = done.value_or(finished);
    last_exchange_seconds_ = util::seconds_between(posted, end);
    last_overlap_seconds_ = util::seconds_between(posted, std::min(end, computed));
    exchange_seconds_ += last_exchange_seconds_;
    overlap_seconds_ += last_overlap_seconds_;
  }
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> mixed;
    for (const auto& node : nodes_) mixed.push_back(mix(node->index, values));
    for (std::size_t h = 0; h < nodes_.size(); ++h) {
      auto& node = *nodes_[h];
      if (!push) {
        node.theta.copy_(mixed[h]);
        continue;
      }
      node.push_weight.copy_(mixed[h].narrow(0, length_, 1));
      node.theta.copy_(mixed[h].narrow(0, 0, length_) / node.push_weight);
    }
  }
  for (std::size_t h = 0; h < nodes_.size(); ++h) {
    bind(*nodes_[h]);
    zero_gradients();
    add_to_gradient(gradients[h]);
    nodes_[h]->optimizer->step();
  }
  loss /= static_cast<double>(nodes_.size());
  return torch::cat(outputs);
}

// Note [Asynchronous gossip]
// parallel.decentralized.asynchronous: dsgd without the round barrier. Node i at its step t mixes
// the newest state it has received from each in-neighbour j, x_j^(s_j), if s_j >= t - staleness;
// a neighbour whose newest state is older (or who has sent none) is left out of this round and
// its weight W_ij goes to i itself, so the row still sums to one; then the local step; then i's
// state of step t + 1 goes to its neighbours' ranks. Nodes on the same rank are in step and read
// each other's state of step t in memory, as in synchronous dsgd.
//
// Transport (AsyncExchange): non-blocking tagged send/recv on the run's communicator, polled by
// the training thread at the start of each round — no background thread, since the communicator
// takes its operations from one thread at a time. Each rank keeps one receive posted per peer
// rank and takes every message that has arrived; a message carries its step, and only the newest
// state per node is kept. A send goes out after each step unless the peer has not yet taken the
// previous one; then it is owed, and the next poll that finds the previous one taken sends the
// states of that moment (so a state nobody could take is replaced by a newer one, never queued):
// a stopped peer holds at most one message of each neighbour in flight, and nothing waits for it. A neighbour
// silent for parallel.timeout_s fails the run as a dead one does: the receive's wait ends with the
// communicator's error naming the rank and the operation, and the launcher's one-line report of
// the failed rank follows as for every strategy.
//
// The run ends, and pauses for every collective the trainer runs (evaluation, metrics, checkpoint,
// the final model), with settle(): every rank sends each peer a last message holding its current
// states and takes its peers' messages up to their last ones, all by polling, so that ranks
// whose receives are full cannot wait on each other. After it no transfer is in flight, every rank
// has reached the same step (the trainer runs the collective at the same step on every rank) and
// every node knows its neighbours' states of that step; the usual node average and evaluation
// follow unchanged. A run's first round, and the first after a settle, only posts the receives
// and sends the states: nothing waits at the start either, and a neighbour not heard from yet is
// left out, as a late one is.
//
// With staleness 0 and every neighbour's state of step t arrived when node i mixes at step t, the
// round is synchronous dsgd's round, bit for bit (the same weights, added in the same order).
// Staleness 0 does not make the run synchronous: a neighbour one step late is left out, not
// waited for, so which neighbours a round mixes depends on timing.
//
// BlueFog's asynchronous optimizers (DistributedWinPutOptimizer over win_create, win_put and
// win_update) are built on MPI one-sided windows: each rank exposes a buffer per in-neighbour,
// win_put writes a rank's parameters into its out-neighbours' buffers, and win_update averages the
// rank's own tensor with whatever the buffers hold (win_mutex guards against reading a buffer
// half-written). We differ in four ways. No window: our backends (Gloo above all) have no
// one-sided operations, so the receiver's posted receive stands in for the window, and a message
// is copied out only once it has arrived whole, so no mutex is needed. A step travels with every
// state, so a round can bound the staleness it mixes and report it; a window buffer holds no
// step, so win_update mixes a neighbour that stopped long ago at full weight. Push-sum is refused:
// BlueFog's asynchronous push-sum adds into the buffers (win_accumulate, with the push-sum weight
// as the window's associated p) so that every share of mass arrives exactly once, where our
// newest-state messages replace one another. And the run ends by settle(), a handshake between
// neighbours, where BlueFog leaves the user to call a barrier and win_free.
torch::Tensor DecentralizedStrategy::round_dsgd_async(const data::Batch& batch, double& loss,
                                                      StepTiming& timing) {
  communicate(&timing, [&] {
    if (!async_->running()) async_->start(node_states(), round_);
    async_->poll(node_states(), round_);
  });
  {
    torch::NoGradGuard no_grad;
    std::map<int, torch::Tensor> local;  // this rank's nodes at step t, before any mixes
    for (const auto& node : nodes_) local[node->index] = node->theta.clone();
    for (auto& node : nodes_) {
      const int i = node->index;
      double own = graph_->weight(i, i), left_out = 0.0;
      std::vector<std::pair<const torch::Tensor*, double>> mixed;
      for (int j : graph_->in_neighbours(i)) {
        if (const auto it = local.find(j); it != local.end()) {
          mixed.emplace_back(&it->second, graph_->weight(i, j));
          continue;
        }
        const auto& newest = async_->newest(j);
        const std::int64_t age = round_ - newest.step;
        if (newest.step < 0 || age > options_.staleness) {
          left_out += graph_->weight(i, j);
          staleness_.skipped += 1.0;
          continue;
        }
        mixed.emplace_back(&newest.state, graph_->weight(i, j));
        const double behind = static_cast<double>(std::max<std::int64_t>(age, 0));
        staleness_.age_sum += behind;
        staleness_.age_max = std::max(staleness_.age_max, behind);
        staleness_.mixed += 1.0;
      }
      auto value = local.at(i) * (left_out > 0.0 ? own + left_out : own);
      for (const auto& [state, weight] : mixed) value.add_(*state, weight);
      node->theta.copy_(value);
      staleness_.node_rounds += 1.0;
    }
  }
  auto outputs = round_local(batch, loss, timing);
  communicate(&timing, [&] { async_->send(node_states(), round_ + 1); });
  charge_bytes(4.0 * static_cast<double>(length_));
  return outputs;
}

// Note [Hierarchical gossip]
// BlueFog's hierarchical_neighbor_allreduce: the ranks of one machine average over a fast local
// all-reduce, one rank per machine talks to the other machines' on the graph of machines, and the
// result is broadcast back. Here a host is ranks_per_host consecutive ranks (HostHierarchy), and
// every graph node it holds (nodes / ranks of them per rank) joins the host's average, so the
// nodes of a host leave every round equal; the graph (parallel.graph, its weights by host) has one
// node per host. A round: the sum of this rank's nodes' messages, all-reduced within the host and
// divided by the host's node count; on the leaders, NodeExchange between hosts and the mix
// sum_g W_hg m_g; a broadcast from the leader. The host mean of a doubly stochastic mix keeps the
// nodes' mean, so dsgd on a complete graph of hosts reaches the mean of all nodes in one round, as
// flat dsgd on the complete graph of nodes does. Push-sum's message (w z, w) averages within a
// host as well: each of the host's m nodes takes the host's mixed (x, w), so sum x and sum w over
// all nodes are m times the hosts' sums, which a column-stochastic W keeps. The bytes charged to
// a node (strategy/node_bytes_sent) are a ring all-reduce's 2 (m - 1) / m of the message for each
// of the host's m nodes, and for the host's first node the message once per host neighbour and
// once per other node of the host (the broadcast).
torch::Tensor DecentralizedStrategy::host_gossip(const std::vector<torch::Tensor>& messages,
                                                 StepTiming& timing) {
  TORCH_INTERNAL_ASSERT(hierarchy_ && !messages.empty());
  auto mean = messages.front().clone();
  for (std::size_t h = 1; h < messages.size(); ++h) mean.add_(messages[h]);
  const int host = hierarchy_->host();
  const double m = static_cast<double>(nodes_.size()) * hierarchy_->ranks_per_host();
  communicate(&timing, [&] {
    if (auto* local = hierarchy_->host_comm()) local->allreduce(mean);
    mean.div_(m);
    if (exchange_) mean = mix(host, exchange_->exchange({mean}));
    if (auto* local = hierarchy_->host_comm()) local->broadcast(mean, /*root=*/0);
  });
  const double bytes = static_cast<double>(mean.numel() * mean.element_size());
  const int first = host * static_cast<int>(m);
  for (auto& node : nodes_) {
    node->bytes_sent += m > 1 ? 2.0 * (m - 1.0) / m * bytes : 0.0;
    if (node->index == first) node->bytes_sent += bytes * (graph_->degree(host) + m - 1.0);
  }
  return mean;
}

torch::Tensor DecentralizedStrategy::round_local(const data::Batch& batch, double& loss, StepTiming& timing) {
  const auto rows = batch.size() / static_cast<std::int64_t>(nodes_.size());
  std::vector<torch::Tensor> outputs;
  const bool scaling = precision_.scaling();
  const double scale = precision_.loss_scale();
  std::vector<torch::Tensor> gradients;  // fp16: each node's, until the ranks agree
  bool overflow = false;
  for (std::size_t h = 0; h < nodes_.size(); ++h) {
    auto& node = *nodes_[h];
    outputs.push_back(forward_backward(node, rows_of(batch.inputs, h, 0, 1, rows),
                                       rows_of(batch.targets, h, 0, 1, rows), loss, timing));
    if (!scaling) {
      node.optimizer->step();
      continue;
    }
    overflow = precision_.check_gradients(model_params_) || overflow;
    gradients.push_back(flat_gradient().clone());
  }
  if (scaling && agree_on_step(overflow, timing)) {
    for (std::size_t h = 0; h < nodes_.size(); ++h) {
      bind(*nodes_[h]);
      zero_gradients();
      add_to_gradient(gradients[h].div_(scale));
      nodes_[h]->optimizer->step();
    }
  }
  loss /= static_cast<double>(nodes_.size());
  if (options_.algorithm == "local_sgd" && (round_ + 1) % options_.local_steps == 0)
    average_all_nodes(timing);
  return torch::cat(outputs);
}

void DecentralizedStrategy::average_all_nodes(StepTiming& timing) {
  torch::NoGradGuard no_grad;
  const double n = layout_.nodes();
  auto average = sum_over_nodes([](const Node& node) { return node.theta; }, &timing) / n;
  if (options_.outer_optimizer == OuterOptimizer::Nesterov) {
    // DiLoCo's outer step: the outer gradient is how far the average moved from the last outer
    // iterate; Nesterov momentum as torch.optim.SGD(nesterov=True).
    TORCH_INTERNAL_ASSERT(outer_.defined());
    const auto delta = outer_ - average;
    outer_momentum_.mul_(options_.outer_momentum).add_(delta);
    outer_.sub_(delta + options_.outer_momentum * outer_momentum_, options_.outer_lr);
    average = outer_.clone();
  }
  // A ring all-reduce among the nodes: each sends 2 (n - 1) / n of the vector.
  const double bytes = n > 1 ? 2.0 * (n - 1.0) / n * 4.0 * static_cast<double>(length_) : 0.0;
  for (auto& node : nodes_) {
    node->theta.copy_(average);
    node->bytes_sent += bytes;
  }
}

torch::Tensor DecentralizedStrategy::round_cadmm(const data::Batch& batch, double& loss, StepTiming& timing) {
  std::map<int, torch::Tensor> values;
  {
    torch::NoGradGuard no_grad;
    values = gossip(messages_of(nodes_, [](const Node& n) { return n.theta.clone(); }), timing);
  }
  charge_bytes(4.0 * static_cast<double>(length_));
  rho_ *= options_.rho_scaling;
  const int iterations = options_.primal_iterations;
  const auto rows = batch.size() / static_cast<std::int64_t>(nodes_.size() * iterations);
  std::vector<torch::Tensor> outputs;
  for (std::size_t h = 0; h < nodes_.size(); ++h) {
    auto& node = *nodes_[h];
    const auto& own = values.at(node.index);
    const auto& neighbours = graph_->neighbours(node.index);
    auto anchor_sum = torch::zeros({length_}, node.theta.device());  // sum_j (x_i + x_j) / 2
    if (!node.dual.defined()) node.dual = torch::zeros({length_}, node.theta.device());
    for (int j : neighbours) {
      node.dual.add_(own - values.at(j), rho_);
      anchor_sum.add_((own + values.at(j)) * 0.5);
    }
    const double degree = static_cast<double>(neighbours.size());
    auto optimizer = node.optimizer ? std::move(node.optimizer) : make_node_optimizer();
    optim::set_learning_rate(*optimizer, lr_);
    for (int it = 0; it < iterations; ++it) {
      outputs.push_back(forward_backward(node, rows_of(batch.inputs, h, it, iterations, rows),
                                         rows_of(batch.targets, h, it, iterations, rows), loss, timing));
      // fp16: the loss's gradient is checked, agreed and unscaled before the regulariser's joins it.
      const double scale = precision_.loss_scale();
      if (!agree_on_step(precision_.check_gradients(model_params_), timing)) continue;
      if (precision_.scaling()) precision_.unscale(model_params_, scale);
      add_to_gradient(node.dual + 2.0 * rho_ * (degree * node.theta - anchor_sum));
      optimizer->step();
    }
    if (options_.persistent_primal_optimizer) node.optimizer = std::move(optimizer);
  }
  loss /= static_cast<double>(nodes_.size() * iterations);
  return torch::cat(outputs);
}

torch::Tensor DecentralizedStrategy::round_dsgt(const data::Batch& batch, double& loss, StepTiming& timing) {
  const auto rows = batch.size() / static_cast<std::int64_t>(nodes_.size());
  if (round_ == 0) {
    for (std::size_t h = 0; h < nodes_.size(); ++h) {
      auto& node = *nodes_[h];
      if (options_.init_grads) {
        double ignored = 0.0;
        const double scale = precision_.loss_scale();
        forward_backward(node, rows_of(batch.inputs, h, 0, 1, rows), rows_of(batch.targets, h, 0, 1, rows),
                         ignored, timing);
        // fp16: agreed per node (every rank hosts as many); an overflow starts from zero.
        if (agree_on_step(precision_.check_gradients(model_params_), timing)) {
          node.last_gradient = flat_gradient().detach().div(precision_.scaling() ? scale : 1.0);
        } else {
          node.last_gradient = torch::zeros({length_}, node.theta.device());
        }
      } else {
        node.last_gradient = torch::zeros({length_}, node.theta.device());
      }
      node.tracker = node.last_gradient.clone();
    }
  }
  std::map<int, torch::Tensor> values;
  {
    torch::NoGradGuard no_grad;
    values = gossip(messages_of(nodes_,
                                [](const Node& n) {
                                  return torch::cat({n.theta, n.tracker});
                                }),
                    timing);
    charge_bytes(8.0 * static_cast<double>(length_));
    std::map<int, torch::Tensor> moved, trackers;
    for (const auto& [j, v] : values) {
      moved[j] = v.narrow(0, 0, length_) - lr_ * v.narrow(0, length_, length_);
      trackers[j] = v.narrow(0, length_, length_);
    }
    for (auto& node : nodes_) {
      node->theta.copy_(mix(node->index, moved));
      node->tracker = mix(node->index, trackers);
    }
  }
  std::vector<torch::Tensor> outputs, gradients;
  const double scale = precision_.loss_scale();
  bool overflow = false;
  for (std::size_t h = 0; h < nodes_.size(); ++h) {
    auto& node = *nodes_[h];
    outputs.push_back(forward_backward(node, rows_of(batch.inputs, h, 0, 1, rows),
                                       rows_of(batch.targets, h, 0, 1, rows), loss, timing));
    overflow = precision_.check_gradients(model_params_) || overflow;
    gradients.push_back(flat_gradient().detach().clone());
  }
  if (agree_on_step(overflow, timing)) {
    torch::NoGradGuard no_grad;
    for (std::size_t h = 0; h < nodes_.size(); ++h) {
      auto& node = *nodes_[h];
      const auto gradient = precision_.scaling() ? gradients[h].div_(scale) : gradients[h];
      node.tracker.add_(gradient - node.last_gradient);
      node.last_gradient = gradient;
    }
  }
  loss /= static_cast<double>(nodes_.size());
  return torch::cat(outputs);
}

torch::Tensor DecentralizedStrategy::round_choco(const data::Batch& batch, double& loss, StepTiming& timing) {
  auto outputs = round_local(batch, loss, timing);  // x_i - lr g_i (the configured optimizer)
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> messages;
  for (const auto& node : nodes_) {
    messages.push_back(compressor_->encode(node->theta - xhat_.at(node->index), node->index, round_));
  }
  const auto received = gossip(messages, timing);
  charge_bytes(static_cast<double>(compressor_->message_bytes()));
  for (const auto& [j, message] : received)
    xhat_.at(j).add_(compressor_->decode(message, j, round_).to(xhat_.at(j).device()));
  for (auto& node : nodes_) {
    const auto& own = xhat_.at(node->index);
    auto step = torch::zeros({length_}, own.device());
    for (int j : graph_->neighbours(node->index))
      step.add_(xhat_.at(j) - own, graph_->weight(node->index, j));
    node->theta.add_(step, options_.consensus_step);
  }
  return outputs;
}

// Note [Push-sum in rounds]
// BlueFog's DistributedPushSumOptimizer accumulates into MPI windows (win_accumulate) while the
// next forward runs, one push-sum weight per parameter tensor. dtrain's rounds are synchronous:
// every node sends (w_i z_i, w_i) as one message through NodeExchange, and reads its
// in-neighbours' messages of the same round, so the run is the same on any number of ranks; one
// weight per node, since every parameter of a node is mixed with the same shares. The node holds
// z_i = x_i / w_i in theta, so evaluation, the consensus error and the optimizer all see the
// de-biased parameters, and the optimizer steps z_i, as SGP's code steps the unbiased model. On a
// column-stochastic W the sums of x and of w are kept, w stays positive, and z_i tends to
// sum x / sum w; plain averaging with such a W (not doubly stochastic) drifts to a weighted
// mean instead, which is why dsgd and dsgt refuse it.
torch::Tensor DecentralizedStrategy::round_push_sum(const data::Batch& batch, double& loss,
                                                    StepTiming& timing) {
  auto outputs = round_local(batch, loss, timing);  // z_i <- a step of optim.* at z_i
  torch::NoGradGuard no_grad;
  const auto messages = messages_of(nodes_, [](const Node& n) {
    return torch::cat({n.theta * n.push_weight, n.push_weight});
  });
  if (hierarchy_) {
    const auto mixed = host_gossip(messages, timing);
    for (auto& node : nodes_) {
      node->push_weight.copy_(mixed.narrow(0, length_, 1));
      node->theta.copy_(mixed.narrow(0, 0, length_) / node->push_weight);
    }
    return outputs;
  }
  const auto values = gossip(messages, timing);
  charge_bytes(4.0 * static_cast<double>(length_ + 1));
  std::vector<torch::Tensor> mixed;  // every mix before any node changes
  for (const auto& node : nodes_) mixed.push_back(mix(node->index, values));
  for (std::size_t h = 0; h < nodes_.size(); ++h) {
    auto& node = *nodes_[h];
    node.push_weight.copy_(mixed[h].narrow(0, length_, 1));
    node.theta.copy_(mixed[h].narrow(0, 0, length_) / node.push_weight);
  }
  return outputs;
}

torch::Tensor DecentralizedStrategy::round_centralized(const data::Batch& batch, double& loss,
                                                       StepTiming& timing) {
  auto& first = *nodes_.front();
  const auto outputs = forward_backward(first, batch.inputs, batch.targets, loss, timing);
  first.samples -= batch.size();
  for (auto& node : nodes_) node->samples += batch.size() / static_cast<std::int64_t>(nodes_.size());
  if (context_.comm && context_.comm->size() > 1) {
    torch::NoGradGuard no_grad;
    auto gradient = flat_gradient();
    communicate(&timing, [&] { context_.comm->allreduce(gradient); });
    gradient.div_(context_.comm->size());
    zero_gradients();
    add_to_gradient(gradient);
  }
  const double scale = precision_.loss_scale();
  if (agree_on_step(precision_.check_gradients(model_params_), timing)) {
    if (precision_.scaling()) precision_.unscale(model_params_, scale);
    first.optimizer->step();
  }
  const double n = layout_.nodes();
  const double bytes = n > 1 ? 2.0 * (n - 1.0) / n * 4.0 * static_cast<double>(length_) : 0.0;
  torch::NoGradGuard no_grad;
  for (auto& node : nodes_) {
    if (node.get() != &first) node->theta.copy_(first.theta);
    node->bytes_sent += bytes;
  }
  return outputs;
}

}  // namespace dtrain::parallel
