// Communication graphs for decentralized training (parallel.graph.*): the shapes DiNNO uses
// (DiNNO's utils/graph_generation.py: wheel, cycle, complete, Erdős–Rényi redrawn until connected),
// star, 2-D torus and explicit edge lists with Metropolis–Hastings weights; BlueFog's directed graphs
// (the static exponential graph of any base, the one-peer exponential graph that changes every round,
// the directed ring); per-edge weights; a per-round schedule of types; and optionally a new draw
// every k rounds. Every graph is drawn from the run's seed with a generator of its own, so every
// rank draws the same graph without communicating. See Note [Directed graphs and mixing weights].
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config/Options.h"
#include "dtrain/parallel/decentralized/BaseGraph.h"

namespace dtrain::parallel {

struct GraphOptions {
  // complete | cycle (ring) | wheel | star | torus | random (erdos_renyi) | edges | exponential |
  // one_peer_exponential | directed_cycle | base | schedule
  std::string type = "cycle";
  int nodes = 0;                      // graph nodes; 0 = one per rank
  double p = 0.3;                     // random: the probability of each edge
  int gen_attempts = 10;              // random: draws until a connected graph, else an error
  int torus_rows = 0;                 // torus: rows of the rows x cols grid; 0 = the most square
  std::string edges;                  // edges: "0-1 1-2 2-0" (pairs a-b, separated by spaces or commas;
                                      // arcs a->b make the graph directed, a-b then both arcs)
  int base = 2;                       // exponential: node i sends to i + base^k mod n
  int peers = 1;                      // base: k of the Base-(k+1) graph, neighbours per round at most
  std::string weights;                // "a-b:w ...": the share of a's value that b takes (any static type)
  std::vector<std::string> schedule;  // schedule: the type of round k is schedule[k mod size]
  std::int64_t redraw_every = 0;      // 0 = one graph for the run; k: a new draw every k rounds
};

void describe_graph(config::OptionVisitor& visitor, GraphOptions& options);

// What a mixing matrix W (x_i <- sum_j W_ij x_j) must satisfy: averaging (DSGD, DSGT, Choco-SGD)
// keeps the mean only when W is doubly stochastic; push-sum needs the columns to sum to one alone.
enum class Mixing { DoublyStochastic, ColumnStochastic };

// A simple graph on nodes 0..n-1 with mixing weights, undirected or directed. An undirected edge
// carries values both ways; a directed edge (a, b) carries a's value to b only.
class Graph {
 public:
  // An undirected graph with Metropolis–Hastings weights: 1 / (1 + max(deg i, deg j)) on an edge,
  // 1 - the rest of the row on the diagonal: symmetric and doubly stochastic. Throws
  // std::invalid_argument for an endpoint out of range or a self loop; repeated edges merge.
  Graph(int nodes, const std::vector<std::pair<int, int>>& edges);
  // A directed graph: node a keeps and sends each out-neighbour an equal share 1 / (out-degree + 1),
  // so W is column stochastic (push-sum's weights, BlueFog's for its exponential graphs).
  static Graph directed(int nodes, const std::vector<std::pair<int, int>>& arcs);
  // An undirected graph with the given weights; each node keeps 1 - the weights of its edges.
  static Graph weighted(int nodes, const std::vector<WeightedEdge>& edges);

  int size() const { return static_cast<int>(out_.size()); }
  bool is_directed() const { return directed_; }
  // Undirected: the neighbours; directed: the nodes a node sends to (out_neighbours).
  const std::vector<int>& neighbours(int node) const { return out_neighbours(node); }
  const std::vector<int>& out_neighbours(int node) const { return out_.at(static_cast<std::size_t>(node)); }
  // The nodes a node receives from (the neighbours of an undirected graph).
  const std::vector<int>& in_neighbours(int node) const { return in_.at(static_cast<std::size_t>(node)); }
  // The messages a node sends per round: its out-degree.
  int degree(int node) const { return static_cast<int>(out_neighbours(node).size()); }
  // Undirected: connected; directed: strongly connected (every node reaches every other).
  bool connected() const;
  // Undirected: the edges (i < j); directed: the arcs (from, to); ascending.
  std::vector<std::pair<int, int>> edges() const;
  // W_ij: the share of node j's value in node i's mix (0 unless j = i or j sends to i).
  double weight(int i, int j) const;
  std::vector<std::vector<double>> mixing_matrix() const;
  // parallel.graph.weights: "a-b:w" gives the edge a-b weight w (undirected: both ways; directed:
  // the share of a's value b takes; "a-a:w" a node's own). Diagonals not given become what is left
  // (undirected: of the row; directed: of a's column). Throws std::invalid_argument naming a token
  // that is not a weight, an edge the graph lacks, or a negative weight.
  void set_weights(const std::string& text);
  bool custom_weights() const { return custom_weights_; }  // set_weights was called
  std::string describe() const;                            // "cycle of 10 nodes, 10 edges"
  std::string type;

 private:
  Graph() = default;
  void link(int nodes, const std::vector<std::pair<int, int>>& pairs, bool directed);

  bool directed_ = false;
  bool custom_weights_ = false;
  std::vector<std::vector<int>> out_, in_;
  std::vector<std::map<int, double>> w_;  // w_[i][j] = W_ij for j = i and j in in_neighbours(i)
};

// Throws std::invalid_argument unless W is nonnegative and, within 1e-9, as `need` demands; the
// message names `algorithm` and what it needs.
void check_mixing(const Graph& graph, Mixing need, const std::string& algorithm);

// The graph of round `round`. random: G(n, p) redrawn up to gen_attempts times until connected,
// draw round / redraw_every (0 when fixed); one_peer_exponential: the arcs of round `round`;
// schedule: the type schedule[round mod size]; the other types, from the second draw on, the same
// shape over a random relabelling of the nodes. Throws std::invalid_argument for a disconnected
// result, a node count a type cannot take, or bad weights.
Graph make_graph(const GraphOptions& options, int nodes, std::uint64_t seed, std::int64_t round = 0);
// Throws std::invalid_argument for a setting the type does not read (p with a cycle).
void check_graph(const GraphOptions& options);
// Whether `round` starts a new graph (round 0 does; one_peer_exponential and schedules every round).
bool graph_changes_at(const GraphOptions& options, std::int64_t round);
// Whether the graph differs between rounds (redraw_every, one_peer_exponential, a schedule).
bool graph_varies(const GraphOptions& options);
// Whether any of its rounds' graphs is directed (exponential, one_peer_exponential, directed_cycle,
// an edge list with arcs a->b).
bool graph_directed(const GraphOptions& options);
// Whether any of its rounds' graphs is drawn from the seed (random).
bool graph_random(const GraphOptions& options);
// "cycle" or, for a schedule, "schedule [exponential, cycle]".
std::string graph_name(const GraphOptions& options);

}  // namespace dtrain::parallel
