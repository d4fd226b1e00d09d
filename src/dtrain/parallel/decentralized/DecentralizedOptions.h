// parallel.decentralized.*: which algorithm the graph nodes run and its settings. Every setting
// belongs to one algorithm; one given for another algorithm is an error (see check()).
#pragma once

#include <string>

#include "dtrain/config/Options.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::parallel {

// Choco-SGD's compressor of x - x_hat (parallel.decentralized.compressor; Compressor.h).
enum class CompressorKind { Identity, TopK, RandomK, Sign, QBit };
inline constexpr util::EnumNames<CompressorKind, 5> kCompressorNames{{{{CompressorKind::Identity, "identity"},
                                                                       {CompressorKind::TopK, "topk"},
                                                                       {CompressorKind::RandomK, "randomk"},
                                                                       {CompressorKind::Sign, "sign"},
                                                                       {CompressorKind::QBit, "qbit"}}}};

// local_sgd's outer step on the average's change (parallel.decentralized.outer_optimizer): none,
// or DiLoCo's Nesterov momentum.
enum class OuterOptimizer { None, Nesterov };
inline constexpr util::EnumNames<OuterOptimizer, 2> kOuterOptimizerNames{
    {{{OuterOptimizer::None, "none"}, {OuterOptimizer::Nesterov, "nesterov"}}}};

struct DecentralizedOptions {
  // dsgd | cadmm | dsgt | choco | push_sum | local_sgd | centralized | individual
  std::string algorithm = "dsgd";
  // cadmm (DiNNO): penalty rho, scaled by rho_scaling every round before use; primal optimizer
  // steps (optim.*) per round, each on a fresh batch; the optimizer kept across rounds or rebuilt.
  double rho_init = 1.0;
  double rho_scaling = 1.0;
  int primal_iterations = 1;
  bool persistent_primal_optimizer = false;
  // dsgt: start the trackers y and g from a gradient at the initial weights (else zeros).
  bool init_grads = true;
  // choco: compressor of x - x_hat (Identity | TopK | RandomK | Sign | QBit), the fraction of
  // coordinates topk and randomk keep, qbit's bits per coordinate, and the consensus step gamma.
  CompressorKind compressor = CompressorKind::TopK;
  double compression_ratio = 0.1;
  int bits = 4;
  double consensus_step = 0.5;
  // local_sgd: local steps between averages; DiLoCo's outer step (None | Nesterov) on the
  // average's change, with its learning rate and momentum.
  int local_steps = 8;
  OuterOptimizer outer_optimizer = OuterOptimizer::None;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  // dsgd and push_sum: hierarchical gossip (see Note [Hierarchical gossip]): the nodes of a host
  // average over an all-reduce, the hosts gossip on parallel.graph, and the host's result is
  // broadcast to its ranks. A host is ranks_per_host consecutive ranks; 0 takes the launcher's
  // local world size (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, ...).
  bool hierarchical = false;
  int ranks_per_host = 0;
  // dsgd: adapt-with-combine (see Note [Adapt with combine]): the exchange of round t's parameters
  // is in flight while the nodes compute their gradients at them, and
  // x_i <- sum_j W_ij x_j - lr g_i(x_i), both at round t; else the mix first, then the gradient at
  // the mixed point.
  bool adapt_with_combine = false;
  // dsgd: asynchronous gossip (see Note [Asynchronous gossip]): no round barrier; each node mixes
  // the newest state received from each neighbour no more than `staleness` steps behind it, and a
  // neighbour further behind gives its weight to the node itself instead of being waited for.
  bool asynchronous = false;
  int staleness = 2;
  // A straggler for experiments, with any algorithm: rank delay_rank sleeps delay_ms after each
  // step, as a slower worker would (-1: none).
  int delay_rank = -1;
  double delay_ms = 0.0;

  // Throws std::invalid_argument naming a setting that differs from its default but belongs to
  // another algorithm than `algorithm`, or hierarchical settings an algorithm cannot take.
  void check() const;
  void check_hierarchy() const;
  void check_asynchronous() const;
};

void describe_decentralized(config::OptionVisitor& visitor, DecentralizedOptions& options);

}  // namespace dtrain::parallel
