// The rounds of the Base-(k+1) graph; see BaseGraph.h.
#include "dtrain/parallel/decentralized/BaseGraph.h"

#include <numeric>
#include <optional>

namespace dtrain::parallel {
namespace {

using Round = std::vector<WeightedEdge>;

// m as a product of factors of at most k + 1 (the largest first taken), or nothing when m has a
// prime factor above k + 1.
std::optional<std::vector<int>> radices(int m, int peers) {
  std::vector<int> out;
  for (int f = peers + 1; f >= 2 && m > 1;) {
    if (m % f == 0) {
      out.push_back(f);
      m /= f;
    } else {
      --f;
    }
  }
  if (m != 1) return std::nullopt;
  return out;
}

// A k-peer hyper-hypercube over the nodes first..first+size-1 with the given radices: round t joins
// the nodes whose mixed-radix index differs in digit t alone, f_t of them at weight 1/f_t each,
// so after every digit each node holds the members' average.
std::vector<Round> hypercube(int first, int size, const std::vector<int>& radix) {
  std::vector<Round> rounds;
  int stride = 1;
  for (int f : radix) {
    Round round;
    for (int i = 0; i < size; ++i) {
      const int digit = (i / stride) % f;
      for (int e = digit + 1; e < f; ++e)
        round.push_back({first + i, first + i + (e - digit) * stride, 1.0 / f});
    }
    rounds.push_back(std::move(round));
    stride *= f;
  }
  return rounds;
}

// Appends `more` to `rounds` starting at round `at`, merging rounds that coincide (disjoint nodes).
void overlay(std::vector<Round>& rounds, std::size_t at, const std::vector<Round>& more) {
  if (rounds.size() < at + more.size()) rounds.resize(at + more.size());
  for (std::size_t t = 0; t < more.size(); ++t)
    rounds[at + t].insert(rounds[at + t].end(), more[t].begin(), more[t].end());
}

struct Group {
  int first, size, digit, block;  // size = digit * block, block = (k + 1)^p
};

}  // namespace

// Note [Base-(k+1) graphs]
// Takezawa et al.'s construction, derived afresh rather than ported from their code. When every
// prime factor of n is at most k + 1 the hyper-hypercube averages exactly. Otherwise write n in
// base k + 1, n = sum_l a_l (k+1)^p_l with p_0 > p_1 > ..., and give group V_l the next
// a_l (k+1)^p_l nodes. First every group averages within itself (a hyper-hypercube each, at the
// same time). Then, from the smallest group to the largest, V_s joins R = V_{s+1} u ... (whose
// nodes all hold R's average B while V_s's hold its own average A): every node of R takes an edge
// to one node of each of V_s's a_s blocks of (k+1)^p_s nodes, weight r / a_s with
// r = |V_s| / (|V_s| + |R|), and keeps 1 - r, so it holds (1 - r) B + r A, the average of V_s u R.
// |R| < (k+1)^p_s, so no node of V_s takes two edges, and each block's sum becomes its size times
// that average; a hyper-hypercube inside each block then spreads it. The merges run one after
// another, where the paper overlaps them with the blocks' averaging: a few more rounds, the same
// exact average. Every round is symmetric and doubly stochastic, with at most k edges per node.
std::vector<std::vector<WeightedEdge>> base_graph_rounds(int nodes, int peers) {
  std::vector<Round> rounds;
  if (const auto whole = radices(nodes, peers)) {
    rounds = hypercube(0, nodes, *whole);
  } else {
    std::vector<Group> groups;
    int block = 1;
    while (block <= nodes / (peers + 1)) block *= peers + 1;
    for (int first = 0, rest = nodes; block > 0; block /= peers + 1) {
      const int digit = rest / block;
      if (digit == 0) continue;
      groups.push_back({first, digit * block, digit, block});
      first += digit * block;
      rest -= digit * block;
    }
    for (const auto& g : groups) overlay(rounds, 0, hypercube(g.first, g.size, *radices(g.size, peers)));
    for (int s = static_cast<int>(groups.size()) - 2; s >= 0; --s) {
      const auto& g = groups[static_cast<std::size_t>(s)];
      const int rest_first = g.first + g.size;  // R: every node after V_s
      const double r = static_cast<double>(g.size) / static_cast<double>(nodes - g.first);
      Round merge;
      for (int i = rest_first; i < nodes; ++i)
        for (int b = 0; b < g.digit; ++b)
          merge.push_back({i, g.first + b * g.block + (i - rest_first), r / g.digit});
      rounds.push_back(std::move(merge));
      const std::size_t at = rounds.size();
      const auto radix = *radices(g.block, peers);
      for (int b = 0; b < g.digit; ++b) overlay(rounds, at, hypercube(g.first + b * g.block, g.block, radix));
    }
  }
  if (rounds.empty()) rounds.emplace_back();  // one node: one round without edges
  return rounds;
}

}  // namespace dtrain::parallel
