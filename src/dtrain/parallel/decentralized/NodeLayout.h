// Which rank hosts which graph node: n nodes over `world` ranks in equal contiguous shares, so the
// same configuration runs 10 nodes in one process or on 2, 5 or 10 ranks.
#pragma once

#include <vector>

namespace dtrain::parallel {

class NodeLayout {
 public:
  // Throws std::invalid_argument when world does not divide nodes.
  NodeLayout(int nodes, int world);

  int nodes() const { return nodes_; }
  int world() const { return world_; }
  int per_rank() const { return nodes_ / world_; }
  int owner(int node) const { return node / per_rank(); }
  int first(int rank) const { return rank * per_rank(); }
  std::vector<int> local(int rank) const;

 private:
  int nodes_;
  int world_;
};

class Graph;

// What `rank` exchanges with another rank over `graph`: its nodes with an out-neighbour on that rank
// (send) and that rank's nodes with an out-neighbour here (recv), both ascending; the ranks ascending,
// each once. Both ends of a link derive the same lists from the same graph (the same nodes both ways
// on an undirected one).
struct NodeLink {
  int rank = 0;
  std::vector<int> send;
  std::vector<int> recv;
};
std::vector<NodeLink> node_links(const Graph& graph, const NodeLayout& layout, int rank);

}  // namespace dtrain::parallel
