// Communication graphs: every type's shape, Metropolis weights symmetric and doubly stochastic,
// Erdős–Rényi redrawn until connected (and the error when it never is), seeded and time-varying
// draws, edge lists, and how nodes are spread over ranks.
#include <gtest/gtest.h>

#include <algorithm>
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
