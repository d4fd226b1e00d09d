// NodeLayout's check and shares; see NodeLayout.h.
#include "dtrain/parallel/decentralized/NodeLayout.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <stdexcept>

#include "dtrain/parallel/decentralized/Graph.h"

namespace dtrain::parallel {

NodeLayout::NodeLayout(int nodes, int world) : nodes_(nodes), world_(world) {
  if (nodes < 1 || world < 1) throw std::invalid_argument("parallel.graph.nodes: expected at least one node");
  if (nodes % world != 0) {
    std::string divisors;
    for (int d = 1; d <= nodes; ++d) {
      if (nodes % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
    }
    throw std::invalid_argument(fmt::format(
        "parallel.graph.nodes: {} nodes do not split evenly over {} ranks; use a number of ranks that "
        "divides it ({}) or another node count",
        nodes, world, divisors));
  }
}

std::vector<int> NodeLayout::local(int rank) const {
  std::vector<int> out;
  for (int i = first(rank); i < first(rank) + per_rank(); ++i) out.push_back(i);
  return out;
}

std::vector<NodeLink> node_links(const Graph& graph, const NodeLayout& layout, int rank) {
  std::map<int, std::set<int>> send, recv;
  for (int node : layout.local(rank)) {
    for (int neighbour : graph.out_neighbours(node)) {
      const int owner = layout.owner(neighbour);
      if (owner != rank) send[owner].insert(node);
    }
    for (int neighbour : graph.in_neighbours(node)) {
      const int owner = layout.owner(neighbour);
      if (owner != rank) recv[owner].insert(neighbour);
    }
  }
  std::set<int> ranks;
  for (const auto& entry : send) ranks.insert(entry.first);
  for (const auto& entry : recv) ranks.insert(entry.first);
  std::vector<NodeLink> links;
  for (int other : ranks)
    links.push_back(
        {other, {send[other].begin(), send[other].end()}, {recv[other].begin(), recv[other].end()}});
  return links;
}

}  // namespace dtrain::parallel
