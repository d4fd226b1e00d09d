// The decentralized strategy's set-up, nodes, gossip and evaluation; the rounds of each algorithm
// are in DecentralizedAlgorithms.cpp, metrics and checkpoints in DecentralizedState.cpp.
#include "dtrain/parallel/decentralized/DecentralizedStrategy.h"

#include <fmt/format.h>

#include <chrono>
#include <limits>
#include <stdexcept>
#include <thread>

#include "dtrain/config/Registry.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/decentralized/DecentralizedNode.h"
#include "dtrain/util/Clock.h"

namespace dtrain::parallel {
namespace {

int world_of(const comm::CommunicatorPtr& comm) {
  return comm ? comm->size() : 1;
}

int graph_nodes(const GraphOptions& graph, int world) {
  return graph.nodes > 0 ? graph.nodes : world;
}

// The optimizers each algorithm can honour: DSGT makes its own step x - lr y, so it takes plain
// SGD only; every algorithm steps nodes one batch at a time, so L-BFGS's closure has no place.
void check_optimizer(const torch::optim::Optimizer& probe, const std::string& algorithm) {
  if (dynamic_cast<const torch::optim::LBFGS*>(&probe)) {
    throw std::invalid_argument(
        "optim.name: lbfgs needs a closure over the whole model; decentralized nodes step "
        "with sgd, adam or adamw");
  }
  if (algorithm != "dsgt") return;
  const auto* sgd = dynamic_cast<const torch::optim::SGD*>(&probe);
  const auto& group = probe.param_groups().front().options();
  const auto* sgd_options = dynamic_cast<const torch::optim::SGDOptions*>(&group);
  if (!sgd || !sgd_options || sgd_options->momentum() != 0.0 || sgd_options->weight_decay() != 0.0) {
    throw std::invalid_argument(
        "optim.name: dsgt steps x - lr * y itself, so it takes optim.name: sgd without momentum or weight "
        "decay");
  }
}

// A compressor setting given for a compressor that does not read it.
void check_compressor(const DecentralizedOptions& options) {
  if (options.algorithm != "choco") return;
  const DecentralizedOptions d;
  const bool sparse =
      options.compressor == CompressorKind::TopK || options.compressor == CompressorKind::RandomK;
  if (!sparse && options.compression_ratio != d.compression_ratio) {
    throw std::invalid_argument(
        "parallel.decentralized.compression_ratio: applies to compressor topk or randomk, "
        "not " +
        kCompressorNames.name(options.compressor));
  }
  if (options.compressor != CompressorKind::QBit && options.bits != d.bits) {
    throw std::invalid_argument("parallel.decentralized.bits: applies to compressor qbit, not " +
                                kCompressorNames.name(options.compressor));
  }
}

// Adapt-with-combine keeps its exchange in flight through the gradients, beside which fp16's
// agreement on skipping a step would run a collective.
void check_adapt_with_combine(const DecentralizedOptions& options, optim::Precision precision) {
  if (options.adapt_with_combine && precision == optim::Precision::Fp16) {
    throw std::invalid_argument(
        "parallel.decentralized.adapt_with_combine: fp16 agrees on skipping a step over the ranks while the "
        "exchange is in flight; use train.precision bf16 or fp32, or adapt_with_combine: false");
  }
}

// Asynchronous gossip keeps each neighbour's newest state, so the neighbours must stay the same;
// fp16's agreement on skipping a step is a collective every step, which would put the barrier back.
void check_asynchronous_for(const DecentralizedOptions& options, const GraphOptions& graph, int world) {
  if (options.delay_rank >= world) {
    throw std::invalid_argument(fmt::format(
        "parallel.decentralized.delay_rank: {} is not a rank of this run of {} ranks; set 0 to {} or -1",
        options.delay_rank, world, world - 1));
  }
  if (!options.asynchronous) return;
  if (graph_varies(graph)) {
    throw std::invalid_argument(
        "parallel.decentralized.asynchronous: keeps each neighbour's newest state, so it needs a fixed "
        "graph; set parallel.graph.redraw_every: 0 and a type that does not change between rounds");
  }
}

void check_asynchronous_precision(const DecentralizedOptions& options, optim::Precision precision) {
  if (options.asynchronous && precision == optim::Precision::Fp16) {
    throw std::invalid_argument(
        "parallel.decentralized.asynchronous: fp16 agrees on skipping a step over all ranks every step, "
        "which waits for the slowest; use train.precision bf16 or fp32, or asynchronous: false");
  }
}

// What the algorithm needs of the graph: CADMM's dual and Choco-SGD's x_hat pair each node with
// its neighbours both ways, so they take undirected graphs (Choco-SGD a fixed one, since x_hat is
// kept from round 0); an algorithm that never reads W refuses parallel.graph.weights.
void check_graph_for(const DecentralizedOptions& options, const GraphOptions& graph) {
  const auto& a = options.algorithm;
  if (a == "choco" && graph_varies(graph)) {
    throw std::invalid_argument(
        "parallel.graph: choco keeps every neighbour's x_hat from round 0, so it needs a fixed graph; set "
        "redraw_every: 0 and a type that does not change between rounds");
  }
  const bool reads_weights = a == "dsgd" || a == "dsgt" || a == "choco" || a == "push_sum";
  if (!reads_weights && !graph.weights.empty()) {
    throw std::invalid_argument(fmt::format(
        "parallel.graph.weights: {} does not mix with graph weights; remove them or use dsgd, dsgt, choco or "
        "push_sum",
        a));
  }
  if ((a == "cadmm" || a == "choco") && graph_directed(graph)) {
    const bool arcs = graph_name(graph) == "edges";
    throw std::invalid_argument(fmt::format(
        "{} is directed, but {} exchanges with its neighbours both ways; use an undirected graph ({}) or "
        "algorithm dsgd, dsgt or push_sum",
        arcs ? fmt::format("parallel.graph.edges: '{}' holds arcs a->b, so the graph", graph.edges)
             : fmt::format("parallel.graph.type: {}", graph.type),
        a, arcs ? "edges a-b only" : "cycle, torus, complete, ..."));
  }
}

// The weights an algorithm mixes with must be doubly stochastic (averages) or column stochastic
// (push-sum); see Note [Directed graphs and mixing weights].
void check_mixing_for(const std::string& algorithm, const Graph& graph) {
  if (algorithm == "push_sum") check_mixing(graph, Mixing::ColumnStochastic, algorithm);
  if (algorithm == "dsgd" || algorithm == "dsgt" || algorithm == "choco")
    check_mixing(graph, Mixing::DoublyStochastic, algorithm);
}

// Hierarchical gossip's hosts: parallel.decentralized.ranks_per_host, else the launcher's local world
// size; one rank alone is one host.
std::unique_ptr<HostHierarchy> make_hierarchy(const DecentralizedOptions& options,
                                              const StrategyContext& context) {
  int per_host = options.ranks_per_host;
  if (per_host == 0) {
    if (!context.comm || context.comm->size() == 1) {
      per_host = 1;
    } else if (context.local_world_size > 0) {
      per_host = context.local_world_size;
    } else {
      throw std::invalid_argument(
          "parallel.decentralized.hierarchical: no launcher said how many ranks share a host; set "
          "parallel.decentralized.ranks_per_host");
    }
  }
  return std::make_unique<HostHierarchy>(context.comm.get(), per_host);
}

// Builds the graph of the first round of each type (every entry of a schedule), so that weights
// an algorithm cannot mix with, or a node count a type cannot take, fail before training starts.
void check_first_graphs(const std::string& algorithm, const GraphOptions& graph, int nodes,
                        std::uint64_t seed) {
  const std::size_t rounds = std::max<std::size_t>(1, graph.schedule.size());
  for (std::size_t r = 0; r < rounds; ++r)
    check_mixing_for(algorithm, make_graph(graph, nodes, seed, static_cast<std::int64_t>(r)));
}

}  // namespace

DecentralizedStrategy::DecentralizedStrategy(StrategyContext context)
    : context_(std::move(context)),
      options_(context_.parallel.options.get<DecentralizedOptions>("decentralized")),
      graph_options_(context_.parallel.options.get<GraphOptions>("graph")),
      layout_(graph_nodes(graph_options_, world_of(context_.comm)), world_of(context_.comm)),
      precision_(context_.precision, context_.comm) {
  options_.check();
  check_graph(graph_options_);
  const bool nccl = context_.comm && context_.comm->backend() == "nccl" && context_.comm->size() > 1;
  if (nccl && options_.asynchronous) {
    throw std::invalid_argument(
        "parallel.decentralized.asynchronous: gossip without a round barrier leaves a receive posted for "
        "every neighbour from one step to the next, and NCCL runs point-to-point messages in the order "
        "they are posted, so a send would wait behind a receive that no neighbour has answered; "
        "use parallel.backend: gloo or mpi (tensors on a GPU cross through host memory), or "
        "asynchronous: false");
  }
  check_graph_for(options_, graph_options_);
  check_compressor(options_);
  check_adapt_with_combine(options_, context_.precision);
  check_asynchronous_for(options_, graph_options_, world_of(context_.comm));
  check_asynchronous_precision(options_, context_.precision);
  // NCCL makes the communicator for grouped point-to-point messages on their first use, which
  // every rank must then join; a rank whose nodes all live on it sends nothing, so the world's
  // communicator is made here, where every rank builds its strategy.
  if (nccl) context_.comm->barrier();
  if (options_.hierarchical) hierarchy_ = make_hierarchy(options_, context_);
  for (const auto& p : context_.model->named_parameters(/*recurse=*/true)) {
    // Nodes mix whole flat parameter vectors with their neighbours: a frozen parameter would still
    // move by the rounding of every weighted average, so freezing is refused rather than broken.
    if (!p.value().requires_grad()) {
      throw std::invalid_argument(
          "model.freeze: parameter " + p.key() +
          " is frozen, but parallel.strategy decentralized mixes every parameter with the "
          "graph neighbours; freeze with local, data_parallel, dad or rankdad, or remove "
          "model.freeze");
    }
    param_names_.push_back(p.key());
    model_params_.push_back(p.value());
    length_ += p.value().numel();
  }
  for (const auto& b : context_.model->named_buffers(/*recurse=*/true)) {
    buffer_names_.push_back(b.key());
    model_buffers_.push_back(b.value());
  }
  {
    const auto probe = make_node_optimizer();
    check_optimizer(*probe, options_.algorithm);
    check_precision_optimizer(context_.precision, *probe);
    lr_ = optim::learning_rate(*probe);  // until the trainer's schedule sets it
  }
  rho_ = options_.rho_init;
  const int me = context_.comm ? context_.comm->rank() : 0;
  for (int index : layout_.local(me)) nodes_.push_back(make_node(index));
  check_first_graphs(options_.algorithm, graph_options_, gossip_nodes(), context_.seed);
  start_round();
  if (options_.asynchronous) {
    async_ = std::make_unique<AsyncExchange>(context_.comm.get(), layout_, *graph_, length_,
                                             nodes_.front()->theta.options());
  }
  if (options_.algorithm == "local_sgd" && options_.outer_optimizer == OuterOptimizer::Nesterov) {
    outer_ = nodes_.front()->theta.clone();  // the initial weights, the same on every rank
    outer_momentum_ = torch::zeros_like(outer_);
  }
  if (options_.algorithm == "choco") {
    compressor_ = std::make_unique<Compressor>(
        CompressorOptions{options_.compressor, options_.compression_ratio, options_.bits}, length_,
        context_.seed);
    for (const auto& node : nodes_) {
      xhat_[node->index] = torch::zeros({length_}, node->theta.device());
      for (int j : graph_->neighbours(node->index)) xhat_[j] = torch::zeros({length_}, node->theta.device());
    }
  }
}

// Graph node `index` at the model's weights, with its optimizer and its algorithm's state.
std::unique_ptr<DecentralizedStrategy::Node> DecentralizedStrategy::make_node(int index) {
  auto node = std::make_unique<Node>();
  node->index = index;
  std::vector<torch::Tensor> flat;
  for (const auto& p : model_params_) flat.push_back(p.detach().reshape({-1}));
  node->theta = torch::cat(flat).clone();
  std::int64_t offset = 0;
  for (const auto& p : model_params_) {
    node->params.push_back(node->theta.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  for (const auto& b : model_buffers_) node->buffers.push_back(b.detach().clone());
  const bool own_optimizer =
      options_.algorithm != "dsgt" && (options_.algorithm != "cadmm" || options_.persistent_primal_optimizer);
  if (own_optimizer) node->optimizer = make_node_optimizer();
  if (options_.algorithm == "push_sum") node->push_weight = torch::ones({1}, node->theta.options());
  return node;
}

DecentralizedStrategy::~DecentralizedStrategy() = default;

std::unique_ptr<torch::optim::Optimizer> DecentralizedStrategy::make_node_optimizer() {
  auto optimizer = context_.make_optimizer(model_params_);
  if (lr_ > 0.0) optim::set_learning_rate(*optimizer, lr_);
  return optimizer;
}

// The graph of this round: the first, or a redraw of a time-varying graph.
void DecentralizedStrategy::start_round() {
  if (graph_ && !graph_changes_at(graph_options_, round_)) return;
  graph_ = std::make_unique<Graph>(make_graph(graph_options_, gossip_nodes(), context_.seed, round_));
  check_mixing_for(options_.algorithm, *graph_);
  if (!hierarchy_) {
    exchange_ = std::make_unique<NodeExchange>(context_.comm.get(), layout_, *graph_);
  } else if (hierarchy_->leader()) {
    const int hosts = hierarchy_->hosts();
    exchange_ = std::make_unique<NodeExchange>(hierarchy_->leader_comm(), NodeLayout(hosts, hosts), *graph_);
  }
}

int DecentralizedStrategy::batches_per_step() const {
  return options_.algorithm == "cadmm" ? options_.primal_iterations : 1;
}

void DecentralizedStrategy::set_learning_rate(double lr) {
  lr_ = lr;
  for (auto& node : nodes_) {
    if (node->optimizer) optim::set_learning_rate(*node->optimizer, lr);
  }
}

void DecentralizedStrategy::bind(Node& node) {
  torch::NoGradGuard no_grad;
  for (std::size_t p = 0; p < model_params_.size(); ++p) model_params_[p].set_data(node.params[p]);
  for (std::size_t b = 0; b < model_buffers_.size(); ++b) model_buffers_[b].set_data(node.buffers[b]);
}

void DecentralizedStrategy::zero_gradients() {
  for (auto& p : model_params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

torch::Tensor DecentralizedStrategy::forward_backward(Node& node, const torch::Tensor& inputs,
                                                      const torch::Tensor& targets, double& loss_sum,
                                                      StepTiming& timing) {
  bind(node);
  zero_gradients();
  // fp16: the node's parameters hold their fp16-rounded values until the backward is done.
  const auto half = precision_.half_weights(model_params_);
  auto start = util::Clock::now();
  const auto outputs = precision_.forward(*context_.model, inputs);
  const auto loss = context_.loss(outputs, targets);
  timing.forward += util::seconds_since(start);
  start = util::Clock::now();
  if (precision_.scaling()) {
    (loss * precision_.loss_scale()).backward();
  } else {
    loss.backward();
  }
  timing.backward += util::seconds_since(start);
  node.samples += inputs.size(0);
  loss_sum += loss.item<double>();
  return outputs.detach();
}

torch::Tensor DecentralizedStrategy::flat_gradient() const {
  std::vector<torch::Tensor> parts;
  for (const auto& p : model_params_) {
    parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
  }
  return torch::cat(parts);
}

void DecentralizedStrategy::add_to_gradient(const torch::Tensor& flat) {
  std::int64_t offset = 0;
  for (auto& p : model_params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    p.mutable_grad().add_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

bool DecentralizedStrategy::agree_on_step(bool overflow, StepTiming& timing) {
  if (!precision_.scaling()) return true;
  bool step = true;
  communicate(&timing, [&] { step = precision_.agree(overflow, nullptr); });
  return step;
}

void DecentralizedStrategy::communicate(StepTiming* timing, const std::function<void()>& op) {
  if (!timing || !context_.comm) {
    op();
    return;
  }
  const auto before = context_.comm->stats();
  const auto hierarchy_before = hierarchy_ ? hierarchy_->stats() : comm::CommStats{};
  const auto start = util::Clock::now();
  op();
  timing->communication += util::seconds_since(start);
  count_own_communication(context_.comm, before);
  if (hierarchy_) add_own_communication(comm::difference(hierarchy_->stats(), hierarchy_before));
}

std::map<int, torch::Tensor> DecentralizedStrategy::gossip(const std::vector<torch::Tensor>& messages,
                                                           StepTiming& timing) {
  std::map<int, torch::Tensor> values;
  communicate(&timing, [&] { values = exchange_->exchange(messages); });
  return values;
}

torch::Tensor DecentralizedStrategy::sum_over_nodes(const std::function<torch::Tensor(const Node&)>& value,
                                                    StepTiming* timing) {
  torch::Tensor sum;
  for (const auto& node : nodes_) sum = sum.defined() ? sum + value(*node) : value(*node).clone();
  if (context_.comm && context_.comm->size() > 1) communicate(timing, [&] { context_.comm->allreduce(sum); });
  return sum;
}

torch::Tensor DecentralizedStrategy::node_average(StepTiming* timing) {
  if (options_.algorithm != "push_sum") {
    return sum_over_nodes([](const Node& node) { return node.theta; }, timing) /
           static_cast<double>(layout_.nodes());
  }
  // Push-sum's nodes agree on sum_i x_i / sum_i w_i with x_i = w_i z_i; both sums in one all-reduce.
  const auto sums = sum_over_nodes(
      [](const Node& node) {
        return torch::cat({node.theta * node.push_weight, node.push_weight});
      },
      timing);
  return sums.narrow(0, 0, length_) / sums.narrow(0, length_, 1);
}

torch::Tensor DecentralizedStrategy::mix(int node, const std::map<int, torch::Tensor>& values) const {
  auto mixed = values.at(node) * graph_->weight(node, node);
  for (int j : graph_->in_neighbours(node)) mixed.add_(values.at(j), graph_->weight(node, j));
  return mixed;
}

void DecentralizedStrategy::charge_bytes(double bytes_per_neighbour) {
  for (auto& node : nodes_) node->bytes_sent += bytes_per_neighbour * graph_->degree(node->index);
}

StepResult DecentralizedStrategy::train_step(const data::Batch& batch) {
  const auto start = util::Clock::now();
  const auto before = comm_stats();
  start_round();
  StepResult result;
  result.samples = batch.size();
  double loss = 0.0;
  const auto skipped_before = precision_.scaler() ? precision_.scaler()->skipped_steps() : 0;
  const auto& a = options_.algorithm;
  if (a == "dsgd" && options_.asynchronous) {
    result.outputs = round_dsgd_async(batch, loss, result.timing);
  } else if (options_.adapt_with_combine) {
    result.outputs = round_awc(batch, loss, result.timing);  // dsgd or push_sum
  } else if (a == "dsgd") {
    result.outputs = round_dsgd(batch, loss, result.timing);
  } else if (a == "cadmm") {
    result.outputs = round_cadmm(batch, loss, result.timing);
  } else if (a == "dsgt") {
    result.outputs = round_dsgt(batch, loss, result.timing);
  } else if (a == "choco") {
    result.outputs = round_choco(batch, loss, result.timing);
  } else if (a == "push_sum") {
    result.outputs = round_push_sum(batch, loss, result.timing);
  } else if (a == "centralized") {
    result.outputs = round_centralized(batch, loss, result.timing);
  } else {
    result.outputs = round_local(batch, loss, result.timing);
  }
  ++round_;
  result.loss = loss;
  if (const auto* scaler = precision_.scaler()) {
    result.skipped = scaler->skipped_steps() > skipped_before ? 1.0 : 0.0;
    result.loss_scale = scaler->scale();
  }
  result.bytes_sent = comm::difference(comm_stats(), before).total().wire_bytes;
  const int me = context_.comm ? context_.comm->rank() : 0;
  if (options_.delay_rank == me) {
    // The straggler of parallel.decentralized.delay_rank: a slower worker, counted as its step.
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options_.delay_ms));
  }
  result.timing.set_update_to_rest(util::seconds_since(start));
  return result;
}

std::vector<EvalModel> DecentralizedStrategy::eval_models() const {
  std::vector<EvalModel> models{{"average", -1}};
  if (options_.algorithm == "centralized") return models;  // every node holds the same model
  for (int i = 0; i < layout_.nodes(); ++i) models.push_back({fmt::format("node{}", i), layout_.owner(i)});
  return models;
}

void DecentralizedStrategy::settle_gossip() {
  if (async_ && async_->running()) async_->settle(node_states(), round_);
}

std::vector<torch::Tensor> DecentralizedStrategy::node_states() const {
  std::vector<torch::Tensor> states;
  for (const auto& node : nodes_) states.push_back(node->theta);
  return states;
}

void DecentralizedStrategy::begin_evaluation() {
  settle_gossip();
  const double n = layout_.nodes();
  if (!average_) {
    average_ = std::make_unique<Node>();
    average_->theta = torch::zeros({length_}, nodes_.front()->theta.device());
    std::int64_t offset = 0;
    for (const auto& p : model_params_) {
      average_->params.push_back(average_->theta.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    for (const auto& b : model_buffers_) average_->buffers.push_back(b.detach().clone());
  }
  average_->theta.copy_(node_average(nullptr));
  for (std::size_t b = 0; b < model_buffers_.size(); ++b) {
    if (!torch::isFloatingType(model_buffers_[b].scalar_type())) {
      average_->buffers[b].copy_(nodes_.front()->buffers[b]);
      continue;
    }
    average_->buffers[b].copy_(sum_over_nodes([b](const Node& node) { return node.buffers[b]; }, nullptr) /
                               n);
  }
  context_.model->eval();
}

torch::Tensor DecentralizedStrategy::eval_forward(std::size_t model, const torch::Tensor& inputs) {
  torch::NoGradGuard no_grad;
  if (model == 0) {
    bind(*average_);
  } else {
    const int index = static_cast<int>(model) - 1;
    bind(*nodes_.at(static_cast<std::size_t>(index - layout_.first(layout_.owner(index)))));
  }
  return context_.model->forward(inputs);
}

void DecentralizedStrategy::end_evaluation() {
  context_.model->train();
}

std::int64_t DecentralizedStrategy::poll_gossip() {
  TORCH_INTERNAL_ASSERT(async_);
  if (!async_->running()) async_->start(node_states(), round_);
  async_->poll(node_states(), round_);
  std::int64_t oldest = std::numeric_limits<std::int64_t>::max();
  for (const auto& node : nodes_) {
    for (int j : graph_->in_neighbours(node->index)) {
      if (layout_.owner(j) != layout_.owner(node->index)) oldest = std::min(oldest, async_->newest(j).step);
    }
  }
  return oldest;
}

torch::Tensor DecentralizedStrategy::node_parameters(int node) const {
  for (const auto& n : nodes_) {
    if (n->index == node) return n->theta.clone();
  }
  throw std::invalid_argument(fmt::format("graph node {} is not hosted on this rank", node));
}

std::map<std::string, std::string> DecentralizedStrategy::notes() const {
  std::map<std::string, std::string> notes{
      {"decentralized_algorithm", options_.algorithm},
      {"decentralized_graph", graph_varies(graph_options_)
                                  ? fmt::format("{} of {} nodes, changing between rounds",
                                                graph_name(graph_options_), layout_.nodes())
                                  : graph_->describe()},
      {"decentralized_nodes_per_rank", std::to_string(layout_.per_rank())},
      {"decentralized_parameters_per_node", std::to_string(length_)}};
  if (hierarchy_) {
    notes["decentralized_hosts"] =
        fmt::format("{} hosts of {} ranks", hierarchy_->hosts(), hierarchy_->ranks_per_host());
  }
  if (compressor_) notes["decentralized_message_bytes"] = std::to_string(compressor_->message_bytes());
  return notes;
}

namespace {

// The strategy's entry, and parallel.graph.* beside its own section.
StrategyInfo decentralized_info() {
  config::register_section("parallel", "graph", GraphOptions{}, describe_graph);
  StrategyInfo info{"decentralized",
                    "one model per graph node, each on its own data, talking to its neighbours "
                    "(dsgd, cadmm, dsgt, choco, push_sum, local_sgd, centralized)",
                    /*exact=*/false, /*needs_communicator=*/false,
                    [](StrategyContext c) -> std::unique_ptr<Strategy> {
                      return std::make_unique<DecentralizedStrategy>(std::move(c));
                    }};
  info.extra_sections = {"graph"};
  // Also what `dtrain train --nproc` checks before it starts workers: the layout, the graph's and
  // the algorithm's settings.
  info.data_holders = [](const config::ParallelConfig& parallel, int world) {
    const auto& graph = parallel.options.get<GraphOptions>("graph");
    check_graph(graph);
    const auto& options = parallel.options.get<DecentralizedOptions>("decentralized");
    options.check();
    check_graph_for(options, graph);
    check_asynchronous_for(options, graph, world);
    const NodeLayout layout(graph_nodes(graph, world), world);
    // Hierarchical gossip's graph is over hosts, known here only when ranks_per_host is set.
    int gossip_nodes = layout.nodes();
    if (options.hierarchical)
      gossip_nodes = options.ranks_per_host > 0 ? hosts_of(world, options.ranks_per_host) : 0;
    // A random graph needs the run's seed, unknown here: the strategy checks it when it is made.
    if (!graph_random(graph) && gossip_nodes > 0)
      check_first_graphs(options.algorithm, graph, gossip_nodes, 0);
    return layout.nodes();
  };
  // Asynchronous gossip leaves receives posted from one step to the next; a synchronous round is
  // one batch, which NCCL groups (Note [Grouped point-to-point] in comm/c10d/C10dCommunicator.cpp).
  info.host_point_to_point = [](const config::ParallelConfig& parallel) {
    return parallel.options.get<DecentralizedOptions>("decentralized").asynchronous;
  };
  auto& can = info.capabilities;
  can.fixed_because = "each member holds its own graph nodes";
  can.fp16 = true;
  // No mesh: its ranks exchange parameters with graph neighbours, not along dimensions.
  info.mesh.because =
      "every rank holds graph nodes of its own that exchange parameters with their neighbours";
  // lbfgs refused: it needs a closure over the whole model, and each node steps on its own.
  return info;
}

}  // namespace

DTRAIN_REGISTER_STRATEGY(decentralized, decentralized_info(), DecentralizedOptions{}, describe_decentralized);

}  // namespace dtrain::parallel
