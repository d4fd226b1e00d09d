// Communication graphs: every type's shape, Metropolis weights symmetric and doubly stochastic,
// Erdős–Rényi redrawn until connected (and the error when it never is), seeded and time-varying
// draws, edge lists, the directed exponential graphs and the Base-(k+1) graphs and their mixing
// matrices, per-edge weights, schedules of types, and how nodes are spread over ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "dtrain/parallel/decentralized/Graph.h"
#include "dtrain/parallel/decentralized/NodeLayout.h"

namespace dtrain::parallel {
namespace {

GraphOptions of(const std::string& type) {
  GraphOptions o;
  o.type = type;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void expect_doubly_stochastic(const Graph& g, const std::string& what) {
  const auto w = g.mixing_matrix();
  const int n = g.size();
  for (int i = 0; i < n; ++i) {
    double row = 0, column = 0;
    for (int j = 0; j < n; ++j) {
      row += w[i][j];
      column += w[j][i];
      EXPECT_DOUBLE_EQ(w[i][j], w[j][i]) << what;
      EXPECT_GE(w[i][j], 0.0) << what;
      const auto& nb = g.neighbours(i);
      const bool edge = std::find(nb.begin(), nb.end(), j) != nb.end();
      if (i != j) {
        EXPECT_EQ(w[i][j] > 0, edge) << what << " " << i << "-" << j;
      }
    }
    EXPECT_NEAR(row, 1.0, 1e-12) << what;
    EXPECT_NEAR(column, 1.0, 1e-12) << what;
  }
}

TEST(Graph, EveryTypeHasItsShapeAndDoublyStochasticMetropolisWeights) {
  for (int n : {1, 2, 3, 4, 5, 10, 12}) {
    for (const char* type : {"complete", "cycle", "wheel", "star", "torus", "random"}) {
      auto o = of(type);
      if (std::string(type) == "random") o.p = 0.6, o.gen_attempts = 200;
      const auto g = make_graph(o, n, 1);
      EXPECT_TRUE(g.connected()) << type << " " << n;
      expect_doubly_stochastic(g, std::string(type) + " of " + std::to_string(n));
    }
  }
  EXPECT_EQ(make_graph(of("complete"), 6, 0).edges().size(), 15u);
  EXPECT_EQ(make_graph(of("cycle"), 10, 0).edges().size(), 10u);
  EXPECT_EQ(make_graph(of("wheel"), 5, 0).edges().size(), 8u);  // 4 spokes + a rim of 4
  EXPECT_EQ(make_graph(of("wheel"), 5, 0).degree(0), 4);
  EXPECT_EQ(make_graph(of("star"), 7, 0).edges().size(), 6u);
  const auto torus = make_graph(of("torus"), 12, 0);  // 3 x 4 with wrap-around: degree 4
  EXPECT_EQ(torus.edges().size(), 24u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(torus.degree(i), 4);
  // Metropolis on a cycle: 1/3 to each neighbour and to itself.
  EXPECT_DOUBLE_EQ(make_graph(of("cycle"), 6, 0).weight(0, 1), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(make_graph(of("cycle"), 6, 0).weight(0, 0), 1.0 / 3.0);
}

TEST(Graph, RandomGraphsAreRedrawnUntilConnectedAndFailNamingTheAttempts) {
  auto o = of("random");
  o.p = 0.25;
  o.gen_attempts = 1;
  // Seeds whose first draw is disconnected still succeed with more attempts.
  int rescued = 0;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    o.gen_attempts = 1;
    const bool first = error_of([&] { make_graph(o, 10, seed); }).empty();
    o.gen_attempts = 100;
    const auto g = make_graph(o, 10, seed);
    EXPECT_TRUE(g.connected());
    if (!first) ++rescued;
  }
  EXPECT_GT(rescued, 0);
  o.p = 0.01;
  o.gen_attempts = 3;
  const auto message = error_of([&] { make_graph(o, 10, 0); });
  EXPECT_NE(message.find("in 3 attempts"), std::string::npos) << message;
  EXPECT_NE(message.find("parallel.graph.gen_attempts"), std::string::npos) << message;
}

TEST(Graph, DrawsAreSeededAndRedrawnEveryKRounds) {
  auto o = of("random");
  o.p = 0.4;
  o.gen_attempts = 100;
  EXPECT_EQ(make_graph(o, 12, 5).edges(), make_graph(o, 12, 5).edges());
  EXPECT_NE(make_graph(o, 12, 5).edges(), make_graph(o, 12, 6).edges());
  o.redraw_every = 10;
  EXPECT_EQ(make_graph(o, 12, 5, 3).edges(), make_graph(o, 12, 5, 9).edges());
  EXPECT_NE(make_graph(o, 12, 5, 9).edges(), make_graph(o, 12, 5, 10).edges());
  EXPECT_TRUE(graph_changes_at(o, 0));
  EXPECT_TRUE(graph_changes_at(o, 20));
  EXPECT_FALSE(graph_changes_at(o, 21));
  // A fixed shape is relabelled: another graph, the same degrees.
  auto wheel = of("wheel");
  wheel.redraw_every = 5;
  const auto a = make_graph(wheel, 8, 1, 0), b = make_graph(wheel, 8, 1, 5);
  EXPECT_NE(a.edges(), b.edges());
  std::vector<int> da, db;
  for (int i = 0; i < 8; ++i) da.push_back(a.degree(i)), db.push_back(b.degree(i));
  std::sort(da.begin(), da.end());
  std::sort(db.begin(), db.end());
  EXPECT_EQ(da, db);
  expect_doubly_stochastic(b, "relabelled wheel");
}

TEST(Graph, EdgeListsAreParsedAndCheckedAndSettingsOfOtherTypesRefused) {
  auto o = of("edges");
  o.edges = "0-1, 1-2 2-3 3-0 1-0";
  const auto g = make_graph(o, 4, 0);
  EXPECT_EQ(g.edges().size(), 4u);
  expect_doubly_stochastic(g, "edge list");
  for (const char* bad : {"0-4", "1-1", "0_1", "a-b"}) {
    o.edges = bad;
    EXPECT_NE(error_of([&] { make_graph(o, 4, 0); }).find("parallel.graph.edges"), std::string::npos) << bad;
  }
  o.edges = "0-1 2-3";
  EXPECT_NE(error_of([&] { make_graph(o, 4, 0); }).find("not connected"), std::string::npos);
  auto cycle = of("cycle");
  cycle.p = 0.5;
  EXPECT_NE(error_of([&] { check_graph(cycle); }).find("parallel.graph.p"), std::string::npos);
  auto torus = of("torus");
  torus.torus_rows = 5;
  EXPECT_NE(error_of([&] { make_graph(torus, 12, 0); }).find("torus_rows"), std::string::npos);
  EXPECT_EQ(error_of([&] { check_graph(torus); }), "");
}

using Matrix = std::vector<std::vector<double>>;

Matrix times(const Matrix& a, const Matrix& b) {
  const std::size_t n = a.size();
  Matrix c(n, std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < n; ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

// Sums of every row and column of W: (worst |row - 1|, worst |column - 1|).
std::pair<double, double> stochastic_errors(const Matrix& w) {
  double rows = 0, columns = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    double row = 0, column = 0;
    for (std::size_t j = 0; j < w.size(); ++j) {
      row += w[i][j];
      column += w[j][i];
      EXPECT_GE(w[i][j], 0.0);
    }
    rows = std::max(rows, std::abs(row - 1.0));
    columns = std::max(columns, std::abs(column - 1.0));
  }
  return {rows, columns};
}

TEST(Graph, ExponentialGraphsSendToEveryPowerOfTheBaseWithDoublyStochasticWeights) {
  auto o = of("exponential");
  const auto g = make_graph(o, 12, 0);
  EXPECT_TRUE(g.is_directed());
  EXPECT_EQ(g.out_neighbours(0), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(g.in_neighbours(0), (std::vector<int>{4, 8, 10, 11}));
  EXPECT_DOUBLE_EQ(g.weight(8, 0), 0.2);  // 1 / (log2-ceil(12) + 1), as BlueFog's ExponentialGraph(12)
  EXPECT_DOUBLE_EQ(g.weight(0, 0), 0.2);
  EXPECT_EQ(g.weight(0, 1), 0.0);  // 0 sends to 1; 1 does not send to 0
  for (int base : {2, 3, 4}) {
    o.base = base;
    for (int n : {1, 2, 3, 5, 8, 12, 16, 17}) {
      const auto e = make_graph(o, n, 0);
      EXPECT_TRUE(e.connected()) << base << " " << n;
      const auto [rows, columns] = stochastic_errors(e.mixing_matrix());
      EXPECT_LT(rows, 1e-12) << "base " << base << ", " << n << " nodes";
      EXPECT_LT(columns, 1e-12) << "base " << base << ", " << n << " nodes";
      EXPECT_NO_THROW(check_mixing(e, Mixing::DoublyStochastic, "dsgd"));
    }
  }
  // Offsets are integer powers: 3^5 = 243 < 250 is one (a float logarithm can miss it).
  o.base = 3;
  EXPECT_EQ(make_graph(o, 250, 0).out_neighbours(0), (std::vector<int>{1, 3, 9, 27, 81, 243}));
}

TEST(Graph, OnePeerExponentialRoundsMultiplyToTheExactAverage) {
  const auto o = of("one_peer_exponential");
  for (int n : {2, 4, 8, 16}) {
    int rounds = 0;
    while ((1 << rounds) < n) ++rounds;
    const Matrix average(static_cast<std::size_t>(n),
                         std::vector<double>(static_cast<std::size_t>(n), 1.0 / n));
    for (std::int64_t start : {0, 5}) {  // any log2(n) consecutive rounds
      Matrix product = make_graph(o, n, 0, start).mixing_matrix();
      EXPECT_TRUE(graph_changes_at(o, start + 1));
      for (int k = 1; k < rounds; ++k) {
        const auto g = make_graph(o, n, 0, start + k);
        EXPECT_EQ(g.degree(0), 1);
        EXPECT_EQ(g.out_neighbours(0).front(), 1 << ((start + k) % rounds));
        if (k == rounds - 1 && n > 2) {
          EXPECT_NE(product, average) << "averaged after fewer rounds";
        }
        product = times(g.mixing_matrix(), product);
      }
      EXPECT_EQ(product, average) << n << " nodes from round " << start;  // exact: every entry is 2^-j
    }
  }
  const auto message = error_of([&] { make_graph(o, 12, 0); });
  EXPECT_NE(message.find("parallel.graph.type: one_peer_exponential"), std::string::npos) << message;
  EXPECT_NE(message.find("found 12 nodes"), std::string::npos) << message;
}

TEST(Graph, BaseGraphRoundsAverageExactlyForAnyNodeCount) {
  auto o = of("base");
  for (int peers : {1, 2, 3}) {
    o.peers = peers;
    for (int n = 1; n <= 25; ++n) {
      const auto rounds = static_cast<std::int64_t>(base_graph_rounds(n, peers).size());
      Matrix product(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(n), 0.0));
      for (int i = 0; i < n; ++i) product[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)] = 1.0;
      for (std::int64_t t = 0; t < rounds; ++t) {
        const auto g = make_graph(o, n, 0, t);
        const auto w = g.mixing_matrix();
        EXPECT_FALSE(g.is_directed());
        for (int i = 0; i < n; ++i) EXPECT_LE(g.degree(i), peers) << n << " nodes, round " << t;
        const auto [rows, columns] = stochastic_errors(w);
        EXPECT_LT(std::max(rows, columns), 1e-12) << n << " nodes, round " << t;
        product = times(w, product);
      }
      double worst = 0.0;
      for (const auto& row : product)
        for (double x : row) worst = std::max(worst, std::abs(x - 1.0 / n));
      EXPECT_LT(worst, 1e-12) << n << " nodes, " << peers << " peers, " << rounds << " rounds";
      EXPECT_EQ(make_graph(o, n, 0, rounds).edges(), make_graph(o, n, 0, 0).edges());  // a cycle of rounds
    }
  }
  // One peer: 8 nodes in three rounds, like the one-peer exponential graph; 6 = 4 + 2 nodes in
  // five: each part averages (two rounds), the two join (one), the four spread it (two).
  EXPECT_EQ(base_graph_rounds(8, 1).size(), 3u);
  EXPECT_EQ(base_graph_rounds(6, 1).size(), 5u);
  EXPECT_EQ(base_graph_rounds(6, 2).size(), 2u);  // 2 x 3: a hyper-hypercube
  EXPECT_TRUE(graph_varies(o));
  auto cycle = of("cycle");
  cycle.peers = 2;
  EXPECT_NE(error_of([&] { check_graph(cycle); }).find("parallel.graph.peers: a setting of graph type base"),
            std::string::npos);
}

TEST(Graph, WeightsAreReadPerEdgeAndCheckedForWhatTheAlgorithmNeeds) {
  auto o = of("directed_cycle");
  EXPECT_DOUBLE_EQ(make_graph(o, 4, 0).weight(1, 0), 0.5);
  EXPECT_NO_THROW(check_mixing(make_graph(o, 4, 0), Mixing::DoublyStochastic, "dsgd"));
  o.weights = "0-1:0.1";  // node 0 keeps 0.9: columns still sum to one, rows 0 and 1 no longer
  const auto g = make_graph(o, 4, 0);
  EXPECT_DOUBLE_EQ(g.weight(0, 0), 0.9);
  EXPECT_DOUBLE_EQ(g.weight(1, 0), 0.1);
  EXPECT_TRUE(g.custom_weights());
  EXPECT_NO_THROW(check_mixing(g, Mixing::ColumnStochastic, "push_sum"));
  auto message = error_of([&] { check_mixing(g, Mixing::DoublyStochastic, "dsgd"); });
  EXPECT_EQ(message.rfind("parallel.graph.weights: row 0", 0), 0u) << message;
  EXPECT_NE(message.find("dsgd averages and needs doubly stochastic weights"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  o.weights = "0-1:0.3 0-0:0.3";  // column 0 sums to 0.6
  message = error_of([&] { check_mixing(make_graph(o, 4, 0), Mixing::ColumnStochastic, "push_sum"); });
  EXPECT_EQ(message.rfind("parallel.graph.weights: column 0", 0), 0u) << message;
  // Undirected weights hold both ways; the diagonal takes the rest of each row.
  auto cycle = of("cycle");
  cycle.weights = "0-1:0.5, 1-2:0.25";
  const auto c = make_graph(cycle, 4, 0);
  EXPECT_DOUBLE_EQ(c.weight(1, 0), 0.5);
  EXPECT_DOUBLE_EQ(c.weight(0, 1), 0.5);
  EXPECT_DOUBLE_EQ(c.weight(1, 1), 0.25);
  EXPECT_DOUBLE_EQ(c.weight(0, 0), 1.0 - 0.5 - 1.0 / 3.0);  // 0-3 keeps its Metropolis weight
  EXPECT_NO_THROW(check_mixing(c, Mixing::DoublyStochastic, "dsgd"));
  const std::vector<std::pair<std::string, std::string>> bad{
      {"0-1", "'0-1' is not a weight"},         {"0-1:x", "'0-1:x' is not a weight"},
      {"0-2:0.5", "0-2:0.5 is no edge"},        {"1-0:0.5", "1-0:0.5 is no edge of the directed_cycle"},
      {"0-1:1.5", "must be a share in [0, 1]"}, {"0-1:0.1 0-1:0.2", "edge 0-1 given twice"},
      {"0-9:0.1", "names a node outside 0..3"}, {"0-1:-0.5", "must be a share in [0, 1]"}};
  for (const auto& [text, expected] : bad) {
    o.weights = text;
    message = error_of([&] { make_graph(o, 4, 0); });
    EXPECT_EQ(message.rfind("parallel.graph.weights: ", 0), 0u) << text << ": " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << text << ": " << message;
  }
  cycle.weights = "0-1:0.7 0-3:0.7";
  message = error_of([&] { make_graph(cycle, 4, 0); });
  EXPECT_NE(message.find("node 0's edges take 1.4 of it"), std::string::npos) << message;
  // Weights name the edges of one graph: refused where the graph changes.
  auto peer = of("one_peer_exponential");
  peer.weights = "0-1:0.5";
  EXPECT_NE(error_of([&] { check_graph(peer); }).find("parallel.graph.weights: name the edges of one fixed"),
            std::string::npos);
  cycle.redraw_every = 3;
  EXPECT_NE(error_of([&] { check_graph(cycle); }).find("(redraw_every)"), std::string::npos);
}

TEST(Graph, ArcsInAnEdgeListMakeADirectedGraphWhoseWeightsAreChecked) {
  auto o = of("edges");
  o.edges = "0->1 1->2, 2->3 3->0";
  const auto ring = make_graph(o, 4, 0);
  EXPECT_TRUE(ring.is_directed());
  EXPECT_TRUE(graph_directed(o));
  EXPECT_EQ(ring.edges(), (std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
  EXPECT_DOUBLE_EQ(ring.weight(1, 0), 0.5);  // 1 takes half of 0's value
  EXPECT_DOUBLE_EQ(ring.weight(0, 1), 0.0);  // and sends 0 nothing
  EXPECT_NO_THROW(check_mixing(ring, Mixing::DoublyStochastic, "dsgd"));
  // An edge a-b beside arcs is both arcs. Node 0 sends to 1 and 2, keeping a third: every column
  // sums to one, row 0 (1/3 of its own, 1/3 of node 2's, 1/2 of node 3's) to 7/6.
  o.edges = "0->1 1->2 2->3 3->0 0-2";
  const auto lopsided = make_graph(o, 4, 0);
  EXPECT_EQ(lopsided.edges().size(), 6u);
  EXPECT_DOUBLE_EQ(lopsided.weight(0, 2), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(lopsided.weight(2, 0), 1.0 / 3.0);
  EXPECT_NO_THROW(check_mixing(lopsided, Mixing::ColumnStochastic, "push_sum"));
  auto message = error_of([&] { check_mixing(lopsided, Mixing::DoublyStochastic, "dsgd"); });
  EXPECT_EQ(message.rfind("parallel.graph.edges: row 0 of the edges graph's mixing matrix", 0), 0u)
      << message;
  EXPECT_NE(message.find("sums to 1.1666"), std::string::npos) << message;
  // Weights of arcs: the share of a's value that b takes; a's own is what its arcs leave.
  o.edges = "0->1 1->2 2->0";
  o.weights = "0-1:0.25";
  const auto weighted = make_graph(o, 3, 0);
  EXPECT_DOUBLE_EQ(weighted.weight(1, 0), 0.25);
  EXPECT_DOUBLE_EQ(weighted.weight(0, 0), 0.75);
  message = error_of([&] { check_mixing(weighted, Mixing::DoublyStochastic, "dsgd"); });
  EXPECT_EQ(message.rfind("parallel.graph.weights: row 0", 0), 0u) << message;  // 0.75 + 2's 0.5
  EXPECT_NE(message.find("sums to 1.25"), std::string::npos) << message;
  o.weights = "1-0:0.25";
  EXPECT_NE(
      error_of([&] { make_graph(o, 3, 0); }).find("1-0:0.25 is no edge of the edges graph (a directed one"),
      std::string::npos);
  o.weights.clear();
  // Every bad arc is refused by name, in one line.
  const std::vector<std::pair<std::string, std::string>> bad{
      {"0->4", "arc 0->4 must join two different nodes in 0..3"},
      {"1->1", "arc 1->1 must join two different nodes"},
      {"0-->1", "arc 0-->1 must join two different nodes"},
      {"0=>1", "'0=>1' is not an edge"},
      {"0->", "'0->' is not an edge"},
      {"->1", "'->1' is not an edge"},
      {"0->1 x", "'x' is not an edge"},
      {"0->1 1->2 2->3", "the edges graph of 4 nodes is not strongly connected"}};
  for (const auto& [text, expected] : bad) {
    o.edges = text;
    message = error_of([&] { make_graph(o, 4, 0); });
    EXPECT_EQ(message.rfind("parallel.graph", 0), 0u) << text << ": " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << text << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  o.edges = "0-1 1-2 2-3";
  EXPECT_FALSE(graph_directed(o));
}

TEST(Graph, SchedulesTakeOneTypePerRoundInTurnAndSettingsBelongToTheirTypes) {
  auto o = of("schedule");
  o.schedule = {"exponential", "ring"};
  o.base = 3;
  EXPECT_NO_THROW(check_graph(o));
  EXPECT_TRUE(graph_varies(o));
  EXPECT_TRUE(graph_directed(o));
  EXPECT_TRUE(graph_changes_at(o, 1));
  const auto r0 = make_graph(o, 10, 0, 0), r1 = make_graph(o, 10, 0, 1), r2 = make_graph(o, 10, 0, 2);
  EXPECT_EQ(r0.type, "exponential");
  EXPECT_EQ(r0.out_neighbours(0), (std::vector<int>{1, 3, 9}));
  EXPECT_EQ(r1.type, "cycle");
  EXPECT_FALSE(r1.is_directed());
  EXPECT_EQ(r2.edges(), r0.edges());
  const std::vector<std::pair<std::function<void(GraphOptions&)>, std::string>> bad{
      {[](GraphOptions& g) { g.schedule = {}; }, "parallel.graph.schedule: empty"},
      {[](GraphOptions& g) {
         g.schedule = {"cycle", "hypercube"};
       },
       "found 'hypercube'"},
      {[](GraphOptions& g) { g.schedule = {"schedule"}; }, "found 'schedule'"},
      {[](GraphOptions& g) { g.type = "cycle"; },
       "parallel.graph.schedule: a setting of graph type schedule"},
      {[](GraphOptions& g) {
         g.schedule = {"cycle", "torus"};
       },
       "parallel.graph.base: a setting of graph type"},
  };
  for (const auto& [change, expected] : bad) {
    auto b = o;
    change(b);
    const auto message = error_of([&] { check_graph(b); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  auto cycle = of("cycle");
  cycle.base = 4;
  EXPECT_NE(error_of([&] { check_graph(cycle); }).find("parallel.graph.base"), std::string::npos);
  EXPECT_FALSE(graph_directed(cycle));
  EXPECT_FALSE(graph_varies(of("exponential")));
}

TEST(NodeLayout, NodesAreSpreadInEqualContiguousShares) {
  const NodeLayout layout(6, 3);
  EXPECT_EQ(layout.per_rank(), 2);
  EXPECT_EQ(layout.owner(5), 2);
  EXPECT_EQ(layout.first(1), 2);
  EXPECT_EQ(layout.local(1), (std::vector<int>{2, 3}));
  const auto message = error_of([] { NodeLayout(10, 4); });
  EXPECT_NE(message.find("(1, 2, 5, 10)"), std::string::npos) << message;
}

}  // namespace
}  // namespace dtrain::parallel
