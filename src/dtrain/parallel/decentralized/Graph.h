// Communication graphs for decentralized training (parallel.graph.*): the shapes DiNNO uses
// (DiNNO's utils/graph_generation.py: wheel, cycle, complete, Erdős–Rényi redrawn until connected)
// and star, 2-D torus and explicit edge lists; Metropolis–Hastings mixing weights; optionally a new
// graph every k rounds (time-varying, one of DiNNO's claims). Every graph is drawn from the run's
// seed with a generator of its own, so every rank draws the same graph without communicating.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config/Options.h"

namespace dtrain::parallel {

struct GraphOptions {
  // complete | cycle (ring) | wheel | star | torus | random (erdos_renyi) | edges
  std::string type = "cycle";
  int nodes = 0;                  // graph nodes; 0 = one per rank
  double p = 0.3;                 // random: the probability of each edge
  int gen_attempts = 10;          // random: draws until a connected graph, else an error
  int torus_rows = 0;             // torus: rows of the rows x cols grid; 0 = the most square
  std::string edges;              // edges: "0-1 1-2 2-0" (pairs a-b, separated by spaces or commas)
  std::int64_t redraw_every = 0;  // 0 = one graph for the run; k: a new draw every k rounds
};

void describe_graph(config::OptionVisitor& visitor, GraphOptions& options);

// An undirected simple graph on nodes 0..n-1.
class Graph {
 public:
  // Throws std::invalid_argument for an endpoint out of range or a self loop; repeated edges merge.
  Graph(int nodes, const std::vector<std::pair<int, int>>& edges);

  int size() const { return static_cast<int>(neighbours_.size()); }
  const std::vector<int>& neighbours(int node) const {
    return neighbours_.at(static_cast<std::size_t>(node));
  }
  int degree(int node) const { return static_cast<int>(neighbours(node).size()); }
  bool connected() const;
  std::vector<std::pair<int, int>> edges() const;  // (i < j), ascending
  // Metropolis–Hastings: 1 / (1 + max(deg i, deg j)) on an edge, 1 - the rest of the row on the
  // diagonal, 0 elsewhere: symmetric and doubly stochastic.
  double weight(int i, int j) const;
  std::vector<std::vector<double>> mixing_matrix() const;
  std::string describe() const;  // "cycle of 10 nodes, 10 edges"
  std::string type;

 private:
  std::vector<std::vector<int>> neighbours_;
};

// The graph of round `round`: draw round / redraw_every (0 when fixed). random: G(n, p) redrawn up
// to gen_attempts times until connected; the other types, from the second draw on, the same shape
// over a random relabelling of the nodes. Throws std::invalid_argument for a disconnected result.
Graph make_graph(const GraphOptions& options, int nodes, std::uint64_t seed, std::int64_t round = 0);
// Throws std::invalid_argument for a setting the type does not read (p with a cycle).
void check_graph(const GraphOptions& options);
// Whether `round` starts a new draw (round 0 does).
bool graph_changes_at(const GraphOptions& options, std::int64_t round);

}  // namespace dtrain::parallel
