// Graph shapes, the seeded draws and Metropolis weights; see Graph.h.
#include "dtrain/parallel/decentralized/Graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
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
    s.add({"exponential", "directed: node i sends to i + base^k mod n for every base^k < n (BlueFog's)"});
    s.add({"one_peer_exponential",
           "directed, a new graph every round: at round k node i sends to i + 2^(k mod log2 n) only"});
    s.add({"directed_cycle", "a directed ring: node i sends to i+1 only", {"directed_ring"}});
    s.add({"base",
           "Takezawa et al.'s Base-(k+1) graph, k = peers: rounds of at most k neighbours that average "
           "exactly for any node count"});
    s.add({"schedule", "the types in parallel.graph.schedule, one per round in turn"});
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

// "a-b" as two integers, or nothing when `token` is not of that form.
std::optional<std::pair<int, int>> parse_pair(const std::string& token) {
  const auto dash = token.find('-');
  if (dash == std::string::npos) return std::nullopt;
  std::size_t used_a = 0, used_b = 0;
  try {
    const int a = std::stoi(token.substr(0, dash), &used_a);
    const int b = std::stoi(token.substr(dash + 1), &used_b);
    if (used_a != dash || used_b != token.size() - dash - 1) return std::nullopt;
    return std::make_pair(a, b);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::vector<std::string> tokens_of(const std::string& text) {
  std::string spaced = text;
  std::replace(spaced.begin(), spaced.end(), ',', ' ');
  std::istringstream in(spaced);
  std::vector<std::string> out;
  for (std::string token; in >> token;) out.push_back(token);
  return out;
}

struct Shape {
  Edges pairs;
  bool directed = false;
};

// Whether `text` (a token or a whole list) holds an arc a->b.
bool has_arc(const std::string& text) {
  return text.find("->") != std::string::npos;
}

// parallel.graph.edges: undirected edges "a-b" and arcs "a->b" (a sends to b). A list with any arc
// is a directed graph, in which an edge a-b is the two arcs a->b and b->a.
Shape parse_edges(const std::string& text, int nodes) {
  Shape shape;
  for (const auto& token : tokens_of(text)) {
    const bool arc = has_arc(token);
    std::string pair_text = token;
    if (arc) pair_text.erase(token.find("->") + 1, 1);  // "a->b" as "a-b"
    const auto pair = parse_pair(pair_text);
    if (!pair) {
      throw std::invalid_argument(fmt::format(
          "parallel.graph.edges: '{}' is not an edge; write pairs of node numbers as a-b, or a->b "
          "for an arc from a to b, e.g. \"0-1 1-2 2-0\" or \"0->1 1->2 2->0\"",
          token));
    }
    const auto [a, b] = *pair;
    if (a < 0 || b < 0 || a >= nodes || b >= nodes || a == b) {
      throw std::invalid_argument(
          fmt::format("parallel.graph.edges: {} {} must join two different nodes in 0..{}",
                      arc ? "arc" : "edge", token, nodes - 1));
    }
    shape.pairs.emplace_back(a, b);
    shape.directed = shape.directed || arc;
  }
  if (shape.pairs.empty() && nodes > 1)
    throw std::invalid_argument("parallel.graph.edges: empty; list the edges as \"0-1 1-2 ...\"");
  if (shape.directed) {
    const auto tokens = tokens_of(text);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const auto [a, b] = shape.pairs[t];
      if (!has_arc(tokens[t])) shape.pairs.emplace_back(b, a);
    }
  }
  return shape;
}

bool power_of_two(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// BlueFog's ExponentialGraph: i -> i + base^k mod n for every base^k < n, powers taken in integers.
Edges exponential(int n, int base) {
  Edges arcs;
  for (std::int64_t offset = 1; offset < n; offset *= base)
    for (int i = 0; i < n; ++i) arcs.emplace_back(i, static_cast<int>((i + offset) % n));
  return arcs;
}

// The one-peer exponential graph of round k: i -> i + 2^(k mod log2 n).
Edges one_peer_exponential(int n, std::int64_t round) {
  if (!power_of_two(n)) {
    throw std::invalid_argument(fmt::format(
        "parallel.graph.type: one_peer_exponential averages exactly only over a power-of-two node count, "
        "found {} nodes; set parallel.graph.nodes to 2, 4, 8, 16, ... or use type base or exponential",
        n));
  }
  Edges arcs;
  int log2n = 0;
  while ((1 << log2n) < n) ++log2n;
  if (log2n == 0) return arcs;
  const int offset = 1 << static_cast<int>(round % log2n);
  for (int i = 0; i < n; ++i) arcs.emplace_back(i, (i + offset) % n);
  return arcs;
}

Shape shape(const GraphOptions& o, int n, std::int64_t round) {
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
    return parse_edges(o.edges, n);
  } else if (o.type == "exponential") {
    return {exponential(n, o.base), true};
  } else if (o.type == "one_peer_exponential") {
    return {one_peer_exponential(n, round), true};
  } else if (o.type == "directed_cycle") {
    for (int i = 0; n > 1 && i < n; ++i) edges.emplace_back(i, (i + 1) % n);
    return {edges, true};
  } else {
    throw std::invalid_argument(
        fmt::format("parallel.graph.type: expected one of {}, found '{}'", graph_types().list(), o.type));
  }
  return {edges, false};
}

// How many nodes node 0 reaches along `next` (itself included).
std::size_t reached(const std::vector<std::vector<int>>& next) {
  std::vector<bool> seen(next.size(), false);
  std::vector<int> stack{0};
  seen[0] = true;
  std::size_t count = 1;
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    for (int j : next[static_cast<std::size_t>(i)]) {
      if (!seen[static_cast<std::size_t>(j)]) {
        seen[static_cast<std::size_t>(j)] = true;
        ++count;
        stack.push_back(j);
      }
    }
  }
  return count;
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
  v.text("edges", o.edges, config::Text::Any,
         "type edges: pairs a-b, or arcs a->b (a sends to b: a directed graph), e.g. \"0-1 1-2 2-0\"");
  v.integer("base", o.base, config::at_least(2), "exponential: node i sends to i + base^k mod n");
  v.integer("peers", o.peers, config::at_least(1),
            "base: k of the Base-(k+1) graph, the most neighbours a node has per round");
  v.text("weights", o.weights, config::Text::Any,
         "mixing weights a-b:w (the share of a's value b takes), e.g. \"0-1:0.5 0-0:0.5\"");
  v.text_list("schedule", o.schedule, "type schedule: the graph types of rounds 0, 1, ... in turn");
  v.integer("redraw_every", o.redraw_every, config::at_least(0),
            "0: one graph for the run; k: a new draw every k rounds");
}

// Note [Directed graphs and mixing weights]
// A graph holds its mixing matrix W by receiver: w_[i][j] = W_ij, the share of node j's value in
// node i's mix, over j = i and i's in-neighbours. Undirected graphs take Metropolis–Hastings
// weights (symmetric, so doubly stochastic); directed ones take BlueFog's: a node keeps and sends
// each out-neighbour 1 / (out-degree + 1), so every column sums to one, and the circulant shapes
// (exponential, one_peer_exponential, directed_cycle) make every row sum to one as well. What
// differs from BlueFog's topology_util.py: the exponential graph's offsets are integer powers
// (BlueFog tests base ** int(math.log(x, base)) == x, and the float logarithm misses offsets such
// as 3^5 = 243); a time-varying graph is a function of the round every rank evaluates, not a
// per-rank generator of send and receive ranks; the one-peer graph refuses a node count that is no
// power of two, where BlueFog cycles through the offsets anyway and the exact average after log2(n)
// rounds is lost (type base averages exactly for any n: Note [Base-(k+1) graphs]); and the weights
// are checked (check_mixing) for what the algorithm needs before a round uses them, where BlueFog
// trusts the matrix it is given.
Graph::Graph(int nodes, const std::vector<std::pair<int, int>>& edges) {
  link(nodes, edges, /*directed=*/false);
  for (int i = 0; i < nodes; ++i) {
    auto& row = w_[static_cast<std::size_t>(i)];
    double rest = 0.0;
    for (int j : in_neighbours(i)) {
      row[j] = 1.0 / (1.0 + std::max(degree(i), degree(j)));
      rest += row[j];
    }
    row[i] = 1.0 - rest;
  }
}

Graph Graph::directed(int nodes, const std::vector<std::pair<int, int>>& arcs) {
  Graph graph;
  graph.link(nodes, arcs, /*directed=*/true);
  for (int a = 0; a < nodes; ++a) {
    const double share = 1.0 / (1.0 + graph.degree(a));
    graph.w_[static_cast<std::size_t>(a)][a] = share;
    for (int b : graph.out_neighbours(a)) graph.w_[static_cast<std::size_t>(b)][a] = share;
  }
  return graph;
}

Graph Graph::weighted(int nodes, const std::vector<WeightedEdge>& edges) {
  std::vector<std::pair<int, int>> pairs;
  for (const auto& e : edges) pairs.emplace_back(e.a, e.b);
  Graph graph;
  graph.link(nodes, pairs, /*directed=*/false);
  for (const auto& e : edges) {
    graph.w_[static_cast<std::size_t>(e.a)][e.b] = e.weight;
    graph.w_[static_cast<std::size_t>(e.b)][e.a] = e.weight;
  }
  for (int i = 0; i < nodes; ++i) {
    double rest = 0.0;
    for (int j : graph.in_neighbours(i)) rest += graph.weight(i, j);
    graph.w_[static_cast<std::size_t>(i)][i] = 1.0 - rest;
  }
  return graph;
}

void Graph::link(int nodes, const std::vector<std::pair<int, int>>& pairs, bool directed) {
  if (nodes < 1) throw std::invalid_argument("parallel.graph.nodes: expected at least one node");
  directed_ = directed;
  std::vector<std::set<int>> out(static_cast<std::size_t>(nodes)), in(static_cast<std::size_t>(nodes));
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || a >= nodes || b >= nodes || a == b)
      throw std::invalid_argument(
          fmt::format("parallel.graph: edge {}-{} must join two nodes in 0..{}", a, b, nodes - 1));
    out[static_cast<std::size_t>(a)].insert(b);
    in[static_cast<std::size_t>(b)].insert(a);
    if (!directed) {
      out[static_cast<std::size_t>(b)].insert(a);
      in[static_cast<std::size_t>(a)].insert(b);
    }
  }
  for (const auto& s : out) out_.emplace_back(s.begin(), s.end());
  for (const auto& s : in) in_.emplace_back(s.begin(), s.end());
  w_.assign(static_cast<std::size_t>(nodes), {});
}

bool Graph::connected() const {
  return reached(out_) == out_.size() && (!directed_ || reached(in_) == in_.size());
}

std::vector<std::pair<int, int>> Graph::edges() const {
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i < size(); ++i)
    for (int j : out_neighbours(i))
      if (directed_ || i < j) out.emplace_back(i, j);
  return out;
}

double Graph::weight(int i, int j) const {
  const auto& row = w_.at(static_cast<std::size_t>(i));
  const auto found = row.find(j);
  return found == row.end() ? 0.0 : found->second;
}

std::vector<std::vector<double>> Graph::mixing_matrix() const {
  std::vector<std::vector<double>> w(static_cast<std::size_t>(size()),
                                     std::vector<double>(static_cast<std::size_t>(size())));
  for (int i = 0; i < size(); ++i)
    for (const auto& [j, value] : w_[static_cast<std::size_t>(i)])
      w[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = value;
  return w;
}

void Graph::set_weights(const std::string& text) {
  const int n = size();
  std::vector<bool> own(static_cast<std::size_t>(n), false);
  std::set<std::pair<int, int>> given;
  for (const auto& token : tokens_of(text)) {
    const auto colon = token.find(':');
    const auto pair = parse_pair(token.substr(0, colon));
    std::size_t used = 0;
    double w = -1.0;
    try {
      if (colon != std::string::npos) w = std::stod(token.substr(colon + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (!pair || colon == std::string::npos || used == 0 || used != token.size() - colon - 1) {
      throw std::invalid_argument(fmt::format(
          "parallel.graph.weights: '{}' is not a weight; write a-b:w, e.g. \"0-1:0.5 0-0:0.5\"", token));
    }
    const auto [a, b] = *pair;
    if (a < 0 || b < 0 || a >= n || b >= n) {
      throw std::invalid_argument(
          fmt::format("parallel.graph.weights: {} names a node outside 0..{}", token, n - 1));
    }
    if (!(w >= 0.0 && w <= 1.0)) {
      throw std::invalid_argument(
          fmt::format("parallel.graph.weights: {} must be a share in [0, 1], found {}", token, w));
    }
    const auto key = directed_ ? std::make_pair(a, b) : std::make_pair(std::min(a, b), std::max(a, b));
    if (!given.insert(key).second)
      throw std::invalid_argument(fmt::format("parallel.graph.weights: edge {}-{} given twice", a, b));
    if (a == b) {
      own[static_cast<std::size_t>(a)] = true;
      w_[static_cast<std::size_t>(a)][a] = w;
      continue;
    }
    const auto& out = out_neighbours(a);
    if (!std::binary_search(out.begin(), out.end(), b)) {
      throw std::invalid_argument(fmt::format("parallel.graph.weights: {} is no edge of the {} graph{}",
                                              token, type,
                                              directed_ ? " (a directed one: a sends to b)" : ""));
    }
    w_[static_cast<std::size_t>(b)][a] = w;
    if (!directed_) w_[static_cast<std::size_t>(a)][b] = w;
  }
  for (int i = 0; i < n; ++i) {
    if (own[static_cast<std::size_t>(i)]) continue;
    double rest = 0.0;  // undirected: the rest of row i; directed: the shares i sends away
    for (int j : directed_ ? out_neighbours(i) : in_neighbours(i))
      rest += directed_ ? weight(j, i) : weight(i, j);
    if (rest > 1.0 + 1e-12) {
      throw std::invalid_argument(fmt::format(
          "parallel.graph.weights: node {}'s edges take {} of it, more than all; lower them", i, rest));
    }
    w_[static_cast<std::size_t>(i)][i] = std::max(0.0, 1.0 - rest);
  }
  custom_weights_ = true;
}

std::string Graph::describe() const {
  return fmt::format("{} of {} nodes, {} {}", type, size(), edges().size(), directed_ ? "arcs" : "edges");
}

void check_mixing(const Graph& graph, Mixing need, const std::string& algorithm) {
  const auto w = graph.mixing_matrix();
  const int n = graph.size();
  const char* key = graph.custom_weights()  ? "parallel.graph.weights"
                    : graph.type == "edges" ? "parallel.graph.edges"
                                            : "parallel.graph.type";
  for (int j = 0; j < n; ++j) {
    double column = 0.0, row = 0.0;
    for (int i = 0; i < n; ++i) {
      column += w[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      row += w[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)];
    }
    if (std::abs(column - 1.0) > 1e-9) {
      throw std::invalid_argument(
          fmt::format("{}: column {} of the {} graph's mixing matrix (what node {} keeps and sends) "
                      "sums to {}, not 1; {} needs {} weights",
                      key, j, graph.type, j, column, algorithm,
                      need == Mixing::ColumnStochastic ? "column-stochastic" : "doubly stochastic"));
    }
    if (row <= 0.0) {
      throw std::invalid_argument(
          fmt::format("{}: row {} of the {} graph's mixing matrix is zero: node {} would keep and receive "
                      "nothing; give it a positive weight",
                      key, j, graph.type, j));
    }
    if (need == Mixing::DoublyStochastic && std::abs(row - 1.0) > 1e-9) {
      throw std::invalid_argument(fmt::format(
          "{}: row {} of the {} graph's mixing matrix (the shares node {} takes) sums to {}, not 1; {} "
          "averages and needs doubly stochastic weights; push_sum takes column-stochastic ones",
          key, j, graph.type, j, row, algorithm));
    }
  }
}

namespace {

// The types a configuration uses: its type, or every type of its schedule.
std::set<std::string> types_of(const GraphOptions& options) {
  const auto canonical = [](const std::string& t) { return graph_types().resolve(t).value_or(t); };
  std::set<std::string> types;
  if (canonical(options.type) != "schedule") return {canonical(options.type)};
  for (const auto& t : options.schedule) types.insert(canonical(t));
  return types;
}

}  // namespace

void check_graph(const GraphOptions& options) {
  const GraphOptions d;
  const auto type = graph_types().resolve(options.type).value_or(options.type);
  if (type == "schedule" && options.schedule.empty()) {
    throw std::invalid_argument(
        "parallel.graph.schedule: empty, but parallel.graph.type is schedule; list the types of the rounds, "
        "e.g. [exponential, cycle]");
  }
  if (type != "schedule" && !options.schedule.empty()) {
    throw std::invalid_argument(fmt::format(
        "parallel.graph.schedule: a setting of graph type schedule, but parallel.graph.type is {}; set "
        "parallel.graph.type: schedule or remove it",
        type));
  }
  for (const auto& t : options.schedule) {
    const auto entry = graph_types().resolve(t);
    if (!entry || *entry == "schedule") {
      throw std::invalid_argument(fmt::format(
          "parallel.graph.schedule: expected graph types among {}, found '{}'", graph_types().list(), t));
    }
  }
  const auto types = types_of(options);
  const auto refuse = [&](const char* key, const char* owner) {
    throw std::invalid_argument(
        fmt::format("parallel.graph.{}: a setting of graph type {}, but parallel.graph.type is {}; remove it",
                    key, owner, type));
  };
  if (!types.count("random") && options.p != d.p) refuse("p", "random");
  if (!types.count("random") && options.gen_attempts != d.gen_attempts) refuse("gen_attempts", "random");
  if (!types.count("torus") && options.torus_rows != d.torus_rows) refuse("torus_rows", "torus");
  if (!types.count("edges") && !options.edges.empty()) refuse("edges", "edges");
  if (!types.count("exponential") && options.base != d.base) refuse("base", "exponential");
  if (!types.count("base") && options.peers != d.peers) refuse("peers", "base");
  if (!options.weights.empty() && graph_varies(options)) {
    throw std::invalid_argument(
        fmt::format("parallel.graph.weights: name the edges of one fixed graph, but the {} graph changes "
                    "between rounds{}; "
                    "remove the weights or use a fixed graph",
                    type, options.redraw_every > 0 ? " (redraw_every)" : ""));
  }
}

bool graph_varies(const GraphOptions& options) {
  const auto types = types_of(options);
  return options.redraw_every > 0 || types.count("one_peer_exponential") || types.count("base") ||
         options.schedule.size() > 1 ||
         graph_types().resolve(options.type).value_or(options.type) == "schedule";
}

bool graph_directed(const GraphOptions& options) {
  const auto types = types_of(options);
  return types.count("exponential") || types.count("one_peer_exponential") || types.count("directed_cycle") ||
         (types.count("edges") && has_arc(options.edges));
}

bool graph_random(const GraphOptions& options) {
  return types_of(options).count("random") > 0;
}

std::string graph_name(const GraphOptions& options) {
  const auto type = graph_types().resolve(options.type).value_or(options.type);
  if (type != "schedule") return type;
  return fmt::format("schedule [{}]", fmt::join(options.schedule, ", "));
}

bool graph_changes_at(const GraphOptions& options, std::int64_t round) {
  if (round == 0) return true;
  const auto types = types_of(options);
  if (types.count("one_peer_exponential") || types.count("base") || !options.schedule.empty()) return true;
  return options.redraw_every > 0 && round % options.redraw_every == 0;
}

Graph make_graph(const GraphOptions& options, int nodes, std::uint64_t seed, std::int64_t round) {
  GraphOptions o = options;
  o.type = graph_types().resolve(options.type).value_or(options.type);
  if (o.type == "schedule") {
    if (o.schedule.empty()) check_graph(o);
    const auto& entry =
        o.schedule[static_cast<std::size_t>(round % static_cast<std::int64_t>(o.schedule.size()))];
    o.type = graph_types().resolve(entry).value_or(entry);
  }
  const std::int64_t draw = o.redraw_every > 0 ? round / o.redraw_every : 0;
  if (o.type == "random") {
    auto graph = random_graph(o, nodes, seed, draw);
    graph.type = o.type;
    if (!o.weights.empty()) graph.set_weights(o.weights);
    return graph;
  }
  // From the second draw on, the same shape over a random relabelling of the nodes.
  std::vector<int> label(static_cast<std::size_t>(nodes));
  std::iota(label.begin(), label.end(), 0);
  if (draw > 0) {
    auto gen = generator(seed, draw, 2);
    std::shuffle(label.begin(), label.end(), gen);
  }
  const auto relabel = [&](int& node) { node = label[static_cast<std::size_t>(node)]; };
  if (o.type == "base") {
    const auto rounds = base_graph_rounds(nodes, o.peers);
    auto weighted = rounds[static_cast<std::size_t>(round % static_cast<std::int64_t>(rounds.size()))];
    for (auto& e : weighted) relabel(e.a), relabel(e.b);
    auto graph = Graph::weighted(nodes, weighted);
    graph.type = o.type;
    return graph;  // one round alone is not connected; a cycle of rounds averages exactly
  }
  auto [edges, directed] = shape(o, nodes, round);
  for (auto& [a, b] : edges) relabel(a), relabel(b);
  Graph graph = directed ? Graph::directed(nodes, edges) : Graph(nodes, edges);
  graph.type = o.type;
  // A one-peer round alone joins nodes in separate rings; the rounds of a period together contain
  // the ring of offset 1, so the sequence connects every node.
  if (o.type != "one_peer_exponential" && !graph.connected()) {
    throw std::invalid_argument(fmt::format(
        "parallel.graph: the {} graph of {} nodes is not {}connected, so some nodes never agree; add edges",
        o.type, nodes, directed ? "strongly " : ""));
  }
  if (!o.weights.empty()) graph.set_weights(o.weights);
  return graph;
}

}  // namespace dtrain::parallel
