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

}  // namespace dtrain::parallel
