// Graph shapes, the seeded draws and Metropolis weights; see Graph.h.
#include "dtrain/parallel/decentralized/Graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "dtrain/util/Hash.h"

namespace dtrain::parallel {
namespace {

using Edges = std::vector<std::pair<int, int>>;

const config::ChoiceSet& graph_types() {
  static const config::ChoiceSet set = [] {
    config::ChoiceSet s;
    s.add({"complete", "every node joined to every other"});
    s.add({"cycle", "a ring: node i joined to i-1 and i+1", {"ring"}});
    s.add({"wheel", "node 0 joined to all others, which form a cycle (networkx's wheel_graph)"});
    s.add({"star", "node 0 joined to all others"});
    s.add({"torus", "a 2-D grid with wrap-around, torus_rows x (nodes / torus_rows)"});
    s.add({"random", "Erdős–Rényi G(nodes, p), redrawn until connected (gen_attempts)", {"erdos_renyi"}});
    s.add({"edges", "the edge list in parallel.graph.edges"});
    return s;
  }();
  return set;
}

std::mt19937_64 generator(std::uint64_t seed, std::int64_t draw, std::uint64_t stream) {
  util::Fnv1a64 hash;
  const std::uint64_t parts[] = {seed, static_cast<std::uint64_t>(draw), stream};
  hash.add(parts, sizeof(parts));
  return std::mt19937_64(hash.value());
}

Edges torus(int nodes, int rows_option) {
  int rows = rows_option;
  if (rows == 0) {
    rows = static_cast<int>(std::sqrt(static_cast<double>(nodes)));
    while (nodes % rows != 0) --rows;
  }
  if (rows < 1 || nodes % rows != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.graph.torus_rows: {} rows do not divide {} nodes; use a divisor of the node count or 0",
        rows, nodes));
  }
  const int cols = nodes / rows;
  Edges edges;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int i = r * cols + c;
      const int right = r * cols + (c + 1) % cols, down = ((r + 1) % rows) * cols + c;
      if (right != i) edges.emplace_back(i, right);  // a row or column of one wraps onto itself
      if (down != i) edges.emplace_back(i, down);
    }
  }
  return edges;
}

Edges parse_edges(const std::string& text, int nodes) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  Edges edges;
  std::string token;
  while (in >> token) {
    const auto dash = token.find('-');
    std::size_t used_a = 0, used_b = 0;
    int a = -1, b = -1;
    try {
      a = std::stoi(token.substr(0, dash), &used_a);
      b = std::stoi(token.substr(dash + 1), &used_b);
    } catch (const std::exception&) {
      used_a = 0;
    }
    if (dash == std::string::npos || used_a != dash || used_b != token.size() - dash - 1) {
      throw std::invalid_argument(
          fmt::format("parallel.graph.edges: '{}' is not an edge; write pairs of node numbers as a-b, e.g. "
                      "\"0-1 1-2 2-0\"",
                      token));
    }
    if (a < 0 || b < 0 || a >= nodes || b >= nodes || a == b) {
      throw std::invalid_argument(fmt::format(
          "parallel.graph.edges: edge {} must join two different nodes in 0..{}", token, nodes - 1));
    }
    edges.emplace_back(a, b);
  }
  if (edges.empty() && nodes > 1)
    throw std::invalid_argument("parallel.graph.edges: empty; list the edges as \"0-1 1-2 ...\"");
  return edges;
}

Edges shape(const GraphOptions& o, int n) {
  Edges edges;
  if (o.type == "complete") {
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) edges.emplace_back(i, j);
  } else if (o.type == "cycle") {
    for (int i = 0; n > 1 && i < n; ++i) edges.emplace_back(i, (i + 1) % n);
  } else if (o.type == "wheel") {
    for (int i = 1; i < n; ++i) edges.emplace_back(0, i);
    for (int i = 1; n > 3 && i < n; ++i) edges.emplace_back(i, i + 1 < n ? i + 1 : 1);
    if (n == 3) edges.emplace_back(1, 2);
  } else if (o.type == "star") {
    for (int i = 1; i < n; ++i) edges.emplace_back(0, i);
  } else if (o.type == "torus") {
    edges = torus(n, o.torus_rows);
  } else if (o.type == "edges") {
    edges = parse_edges(o.edges, n);
  } else {
    throw std::invalid_argument(
        fmt::format("parallel.graph.type: expected one of {}, found '{}'", graph_types().list(), o.type));
  }
  return edges;
}

Graph random_graph(const GraphOptions& o, int n, std::uint64_t seed, std::int64_t draw) {
  auto gen = generator(seed, draw, 1);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (int attempt = 0; attempt < o.gen_attempts; ++attempt) {
    Edges edges;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j)
        if (uniform(gen) < o.p) edges.emplace_back(i, j);
    Graph graph(n, edges);
    if (graph.connected()) return graph;
  }
  throw std::invalid_argument(
      fmt::format("parallel.graph: no connected Erdős–Rényi graph of {} nodes with p {} in {} attempts; "
                  "raise parallel.graph.p "
                  "or parallel.graph.gen_attempts",
                  n, o.p, o.gen_attempts));
}

}  // namespace

void describe_graph(config::OptionVisitor& v, GraphOptions& o) {
  v.choice("type", o.type, graph_types(), "the communication graph");
  v.integer("nodes", o.nodes, config::at_least(0), "graph nodes, spread over the ranks (0: one per rank)");
  v.number("p", o.p, config::Range{0.0, 1.0, true, false}, "random: the probability of each edge");
  v.integer("gen_attempts", o.gen_attempts, config::at_least(1),
            "random: draws until a connected graph, else an error");
  v.integer("torus_rows", o.torus_rows, config::at_least(0), "torus: rows of the grid (0: the most square)");
  v.text("edges", o.edges, config::Text::Any, "type edges: pairs a-b, e.g. \"0-1 1-2 2-0\"");
  v.integer("redraw_every", o.redraw_every, config::at_least(0),
            "0: one graph for the run; k: a new draw every k rounds");
}

Graph::Graph(int nodes, const std::vector<std::pair<int, int>>& edges) {
  if (nodes < 1) throw std::invalid_argument("parallel.graph.nodes: expected at least one node");
  std::vector<std::set<int>> sets(static_cast<std::size_t>(nodes));
  for (const auto& [a, b] : edges) {
    if (a < 0 || b < 0 || a >= nodes || b >= nodes || a == b)
      throw std::invalid_argument(
          fmt::format("parallel.graph: edge {}-{} must join two nodes in 0..{}", a, b, nodes - 1));
    sets[static_cast<std::size_t>(a)].insert(b);
    sets[static_cast<std::size_t>(b)].insert(a);
  }
  for (const auto& s : sets) neighbours_.emplace_back(s.begin(), s.end());
}

bool Graph::connected() const {
  std::vector<bool> seen(neighbours_.size(), false);
  std::vector<int> stack{0};
  seen[0] = true;
  std::size_t count = 1;
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    for (int j : neighbours(i)) {
      if (!seen[static_cast<std::size_t>(j)]) {
        seen[static_cast<std::size_t>(j)] = true;
        ++count;
        stack.push_back(j);
      }
    }
  }
  return count == neighbours_.size();
}

std::vector<std::pair<int, int>> Graph::edges() const {
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i < size(); ++i)
    for (int j : neighbours(i))
      if (i < j) out.emplace_back(i, j);
  return out;
}

double Graph::weight(int i, int j) const {
  if (i == j) {
    double rest = 0.0;
    for (int k : neighbours(i)) rest += weight(i, k);
    return 1.0 - rest;
  }
  const auto& ni = neighbours(i);
  if (!std::binary_search(ni.begin(), ni.end(), j)) return 0.0;
  return 1.0 / (1.0 + std::max(degree(i), degree(j)));
}

std::vector<std::vector<double>> Graph::mixing_matrix() const {
  std::vector<std::vector<double>> w(static_cast<std::size_t>(size()),
                                     std::vector<double>(static_cast<std::size_t>(size())));
  for (int i = 0; i < size(); ++i)
    for (int j = 0; j < size(); ++j)
      w[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = weight(i, j);
  return w;
}

std::string Graph::describe() const {
  return fmt::format("{} of {} nodes, {} edges", type, size(), edges().size());
}

void check_graph(const GraphOptions& options) {
  const GraphOptions d;
  const auto type = graph_types().resolve(options.type).value_or(options.type);
  const auto refuse = [&](const char* key, const char* owner) {
    throw std::invalid_argument(
        fmt::format("parallel.graph.{}: a setting of graph type {}, but parallel.graph.type is {}; remove it",
                    key, owner, type));
  };
  if (type != "random" && options.p != d.p) refuse("p", "random");
  if (type != "random" && options.gen_attempts != d.gen_attempts) refuse("gen_attempts", "random");
  if (type != "torus" && options.torus_rows != d.torus_rows) refuse("torus_rows", "torus");
  if (type != "edges" && !options.edges.empty()) refuse("edges", "edges");
}

bool graph_changes_at(const GraphOptions& options, std::int64_t round) {
  return round == 0 || (options.redraw_every > 0 && round % options.redraw_every == 0);
}

Graph make_graph(const GraphOptions& options, int nodes, std::uint64_t seed, std::int64_t round) {
  const auto canonical = graph_types().resolve(options.type);
  GraphOptions o = options;
  o.type = canonical.value_or(options.type);
  const std::int64_t draw = o.redraw_every > 0 ? round / o.redraw_every : 0;
  if (o.type == "random") {
    auto graph = random_graph(o, nodes, seed, draw);
    graph.type = o.type;
    return graph;
  }
  auto edges = shape(o, nodes);
  if (draw > 0) {
    std::vector<int> relabel(static_cast<std::size_t>(nodes));
    std::iota(relabel.begin(), relabel.end(), 0);
    auto gen = generator(seed, draw, 2);
    std::shuffle(relabel.begin(), relabel.end(), gen);
    for (auto& [a, b] : edges) {
      a = relabel[static_cast<std::size_t>(a)];
      b = relabel[static_cast<std::size_t>(b)];
    }
  }
  Graph graph(nodes, edges);
  graph.type = o.type;
  if (!graph.connected()) {
    throw std::invalid_argument(fmt::format(
        "parallel.graph: the {} graph of {} nodes is not connected, so some nodes never agree; add edges",
        o.type, nodes));
  }
  return graph;
}

}  // namespace dtrain::parallel
