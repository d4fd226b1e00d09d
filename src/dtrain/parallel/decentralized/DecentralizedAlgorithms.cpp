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

#include "dtrain/optim/Optimizers.h"
#include "dtrain/parallel/decentralized/DecentralizedNode.h"

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
    const auto values = gossip(messages_of(nodes_, [](const Node& n) { return n.theta; }), timing);
    charge_bytes(4.0 * static_cast<double>(length_));
    // Every mix is taken before any node's parameters change, so the parameters themselves serve.
    std::vector<torch::Tensor> mixed;
    for (const auto& node : nodes_) mixed.push_back(mix(node->index, values));
    for (std::size_t h = 0; h < nodes_.size(); ++h) nodes_[h]->theta.copy_(mixed[h]);
  }
  return round_local(batch, loss, timing);
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
  const auto values = gossip(messages_of(nodes_,
                                         [](const Node& n) {
                                           return torch::cat({n.theta * n.push_weight, n.push_weight});
                                         }),
                             timing);
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
