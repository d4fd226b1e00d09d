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
  if (algorithm == "local_sgd" && outer_optimizer == OuterOptimizer::None &&
      (outer_lr != d.outer_lr || outer_momentum != d.outer_momentum)) {
    throw std::invalid_argument(
        "parallel.decentralized.outer_lr/outer_momentum: set, but outer_optimizer is none; set "
        "parallel.decentralized.outer_optimizer: nesterov or remove them");
  }
}

}  // namespace dtrain::parallel
