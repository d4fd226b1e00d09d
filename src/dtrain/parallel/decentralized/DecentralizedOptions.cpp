// The decentralized options' keys, ranges and per-algorithm ownership.
#include "dtrain/parallel/decentralized/DecentralizedOptions.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <vector>

namespace dtrain::parallel {
namespace {

const config::ChoiceSet& algorithms() {
  static const config::ChoiceSet set = [] {
    config::ChoiceSet s;
    s.add({"dsgd", "mix with the neighbours (Metropolis weights), then a local step"});
    s.add({"cadmm", "consensus ADMM as in DiNNO: dual ascent, then primal optimizer steps", {"dinno"}});
    s.add({"dsgt", "gradient tracking: mix parameters and gradient trackers"});
    s.add({"choco", "Choco-SGD: a local step, then gossip of compressed differences"});
    s.add({"push_sum",
           "stochastic gradient push: a local step, then shares of (w x, w) along column-stochastic weights; "
           "directed and time-varying graphs",
           {"sgp"}});
    s.add({"local_sgd", "local steps, then an average over all nodes (DiLoCo's outer step optional)"});
    s.add({"centralized", "one model on all nodes' data: the reference"});
    s.add({"individual", "every node alone on its data, no communication"});
    return s;
  }();
  return set;
}

struct Owned {
  const char* key;
  const char* algorithm;
  std::function<bool(const DecentralizedOptions&, const DecentralizedOptions&)> same;
};

}  // namespace

void describe_decentralized(config::OptionVisitor& v, DecentralizedOptions& o) {
  v.choice("algorithm", o.algorithm, algorithms(), "what the graph nodes run");
  v.number("rho_init", o.rho_init, config::kPositive, "cadmm: the initial penalty rho");
  v.number("rho_scaling", o.rho_scaling, config::Range{1.0}, "cadmm: rho's factor every round");
  v.integer("primal_iterations", o.primal_iterations, config::at_least(1),
            "cadmm: primal optimizer steps per round, each on a fresh batch");
  v.boolean("persistent_primal_optimizer", o.persistent_primal_optimizer,
            "cadmm: keep the primal optimizer across rounds (else rebuilt)");
  v.boolean("init_grads", o.init_grads, "dsgt: start the trackers from a gradient at the initial weights");
  v.choice("compressor", o.compressor, kCompressorNames, "choco: the compressor of x - x_hat");
  v.number("compression_ratio", o.compression_ratio, config::Range{0.0, 1.0, true, false},
           "choco: the fraction of coordinates topk and randomk keep");
  v.integer("bits", o.bits, config::IntRange{1, 7}, "choco: qbit's bits per coordinate");
  v.number("consensus_step", o.consensus_step, config::Range{0.0, 1.0, true, false},
           "choco: the consensus step gamma");
  v.integer("local_steps", o.local_steps, config::at_least(1), "local_sgd: local steps between averages");
  v.choice("outer_optimizer", o.outer_optimizer, kOuterOptimizerNames,
           "local_sgd: DiLoCo's outer step on the average's change (none or nesterov)");
  v.number("outer_lr", o.outer_lr, config::kPositive, "local_sgd: the outer step's learning rate");
  v.number("outer_momentum", o.outer_momentum, config::kUnitOpen, "local_sgd: the outer step's momentum");
  v.boolean(
      "hierarchical", o.hierarchical,
      "dsgd, push_sum: average within each host, gossip between hosts on parallel.graph, broadcast back");
  v.integer("ranks_per_host", o.ranks_per_host, config::at_least(0),
            "hierarchical: consecutive ranks that form a host (0: the launcher's local world size)");
  v.boolean("adapt_with_combine", o.adapt_with_combine,
            "dsgd, push_sum: gradients at the round's own parameters while their exchange is in flight, "
            "then x <- W x - lr g");
  v.boolean("asynchronous", o.asynchronous,
            "dsgd: gossip without a round barrier; mix each neighbour's newest state at most staleness "
            "steps old");
  v.integer("staleness", o.staleness, config::at_least(0),
            "asynchronous: how many steps a neighbour's state may lag and still be mixed (default 2)");
  v.integer("delay_rank", o.delay_rank, config::at_least(-1),
            "a straggler for experiments: the rank that sleeps delay_ms after each step (-1: none)");
  v.number("delay_ms", o.delay_ms, config::kNonNegative, "the straggler's sleep after each step, in ms");
}

void DecentralizedOptions::check() const {
  const DecentralizedOptions d;
  static const std::vector<Owned> owned{
      {"rho_init", "cadmm", [](auto& a, auto& b) { return a.rho_init == b.rho_init; }},
      {"rho_scaling", "cadmm", [](auto& a, auto& b) { return a.rho_scaling == b.rho_scaling; }},
      {"primal_iterations", "cadmm",
       [](auto& a, auto& b) { return a.primal_iterations == b.primal_iterations; }},
      {"persistent_primal_optimizer", "cadmm",
       [](auto& a, auto& b) { return a.persistent_primal_optimizer == b.persistent_primal_optimizer; }},
      {"init_grads", "dsgt", [](auto& a, auto& b) { return a.init_grads == b.init_grads; }},
      {"compressor", "choco", [](auto& a, auto& b) { return a.compressor == b.compressor; }},
      {"compression_ratio", "choco",
       [](auto& a, auto& b) { return a.compression_ratio == b.compression_ratio; }},
      {"bits", "choco", [](auto& a, auto& b) { return a.bits == b.bits; }},
      {"consensus_step", "choco", [](auto& a, auto& b) { return a.consensus_step == b.consensus_step; }},
      {"local_steps", "local_sgd", [](auto& a, auto& b) { return a.local_steps == b.local_steps; }},
      {"outer_optimizer", "local_sgd",
       [](auto& a, auto& b) { return a.outer_optimizer == b.outer_optimizer; }},
      {"outer_lr", "local_sgd", [](auto& a, auto& b) { return a.outer_lr == b.outer_lr; }},
      {"outer_momentum", "local_sgd", [](auto& a, auto& b) { return a.outer_momentum == b.outer_momentum; }},
  };
  for (const auto& entry : owned) {
    if (algorithm != entry.algorithm && !entry.same(*this, d)) {
      throw std::invalid_argument(fmt::format(
          "parallel.decentralized.{}: a setting of algorithm {}, but parallel.decentralized.algorithm is {}; "
          "remove it or set the algorithm to {}",
          entry.key, entry.algorithm, algorithm, entry.algorithm));
    }
  }
  if (adapt_with_combine && algorithm != "dsgd" && algorithm != "push_sum") {
    throw std::invalid_argument(fmt::format(
        "parallel.decentralized.adapt_with_combine: a setting of algorithms dsgd and push_sum, but "
        "parallel.decentralized.algorithm is {}; remove it or set the algorithm to dsgd or push_sum",
        algorithm));
  }
  check_hierarchy();
  check_asynchronous();
  if ((delay_rank >= 0) != (delay_ms > 0.0)) {
    throw std::invalid_argument(
        delay_rank >= 0 ? "parallel.decentralized.delay_rank: names a straggler, but delay_ms is 0; set "
                          "parallel.decentralized.delay_ms or remove delay_rank"
                        : "parallel.decentralized.delay_ms: set, but no delay_rank names the straggler; set "
                          "parallel.decentralized.delay_rank or remove delay_ms");
  }
  if (algorithm == "local_sgd" && outer_optimizer == OuterOptimizer::None &&
      (outer_lr != d.outer_lr || outer_momentum != d.outer_momentum)) {
    throw std::invalid_argument(
        "parallel.decentralized.outer_lr/outer_momentum: set, but outer_optimizer is none; set "
        "parallel.decentralized.outer_optimizer: nesterov or remove them");
  }
}

// Hierarchical gossip replaces the exchange between nodes by one between hosts of host averages
// (Note [Hierarchical gossip]); an algorithm whose state pairs a node with each of its neighbours
// cannot have its nodes merged into hosts.
void DecentralizedOptions::check_hierarchy() const {
  if (hierarchical && adapt_with_combine) {
    throw std::invalid_argument(
        "parallel.decentralized.adapt_with_combine: overlaps the neighbour exchange with the gradients, but "
        "hierarchical gossip runs collectives within each host, which cannot be in flight beside it; set "
        "one of them");
  }
  if (!hierarchical) {
    if (ranks_per_host != 0) {
      throw std::invalid_argument(
          "parallel.decentralized.ranks_per_host: a setting of hierarchical gossip; set "
          "parallel.decentralized.hierarchical: true or remove it");
    }
    return;
  }
  static const std::vector<std::pair<const char*, const char*>> refused{
      {"cadmm", "its dual variable pairs each node with each graph neighbour, which a host average removes"},
      {"dsgt", "its gradient tracker must follow each node's own gradient, which a host average mixes away"},
      {"choco", "it keeps each neighbour's x_hat of compressed differences, node by node"},
      {"local_sgd", "it averages all nodes at once and does not gossip"},
      {"centralized", "it trains one model and does not gossip"},
      {"individual", "its nodes never communicate"},
  };
  for (const auto& [name, why] : refused) {
    if (algorithm == name) {
      throw std::invalid_argument(fmt::format(
          "parallel.decentralized.hierarchical: algorithm {} cannot gossip between hosts: {}; use algorithm "
          "dsgd or push_sum, or hierarchical: false",
          name, why));
    }
  }
}

// Asynchronous gossip mixes whatever state a neighbour last sent; it needs an algorithm whose
// messages may arrive late, twice or not at all (Note [Asynchronous gossip]).
void DecentralizedOptions::check_asynchronous() const {
  if (!asynchronous) {
    if (staleness != DecentralizedOptions{}.staleness) {
      throw std::invalid_argument(
          "parallel.decentralized.staleness: a setting of asynchronous gossip; set "
          "parallel.decentralized.asynchronous: true or remove it");
    }
    return;
  }
  static const std::vector<std::pair<const char*, const char*>> refused{
      {"cadmm", "its dual update pairs each node with each neighbour's parameters of the same round"},
      {"dsgt", "its gradient trackers keep their sum only if every round mixes every neighbour's tracker"},
      {"choco", "each compressed difference must reach every neighbour's x_hat exactly once, in order"},
      {"push_sum",
       "its mass (w x, w) must arrive exactly once, and a newest state mixed twice or left out "
       "adds or loses mass"},
      {"local_sgd", "it averages all nodes at once and does not gossip"},
      {"centralized", "it trains one model and does not gossip"},
      {"individual", "its nodes never communicate"},
  };
  for (const auto& [name, why] : refused) {
    if (algorithm == name) {
      throw std::invalid_argument(fmt::format(
          "parallel.decentralized.asynchronous: algorithm {} cannot gossip asynchronously: {}; use algorithm "
          "dsgd, or asynchronous: false",
          name, why));
    }
  }
  if (hierarchical) {
    throw std::invalid_argument(
        "parallel.decentralized.asynchronous: hierarchical gossip averages within each host by collectives, "
        "which wait for every rank of the host; set one of them");
  }
  if (adapt_with_combine) {
    throw std::invalid_argument(
        "parallel.decentralized.asynchronous: adapt_with_combine waits for the exchange of each round; set "
        "one of them");
  }
}

}  // namespace dtrain::parallel
