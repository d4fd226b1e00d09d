// The Base-(k+1) graph (Takezawa et al. 2023, "Beyond exponential graph: communication-efficient
// topologies for decentralized learning via finite-time convergence"): a short cycle of undirected
// graphs, each node with at most k neighbours per round, whose mixing matrices multiply to the
// exact average 11ᵀ/n for every n, where the one-peer exponential graph needs a power of two.
// See Note [Base-(k+1) graphs].
#pragma once

#include <vector>

namespace dtrain::parallel {

struct WeightedEdge {
  int a = 0, b = 0;     // an undirected edge
  double weight = 0.0;  // the share each end takes of the other's value
};

// The edges of every round of the Base-(k+1) graph of `nodes` nodes and `peers` = k >= 1; a node
// keeps 1 - the weights of its edges. Any `rounds().size()` consecutive rounds average exactly.
std::vector<std::vector<WeightedEdge>> base_graph_rounds(int nodes, int peers);

}  // namespace dtrain::parallel
