// NodeExchange: one gossip round between graph nodes hosted on several ranks. Every node this
// rank hosts offers one message (all messages of a round share dtype and length); each node
// receives its in-neighbours' messages (its neighbours' on an undirected graph). Neighbours on the
// same rank are read in memory; for every other rank that hosts an out-neighbour, this rank sends
// one buffer holding the messages of its nodes with an out-neighbour there (a node's message
// crosses each link once, however many neighbours it has behind it), and all sends and receives of
// a round are in flight together.
#pragma once

#include <torch/torch.h>

#include <map>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/parallel/decentralized/Graph.h"
#include "dtrain/parallel/decentralized/NodeLayout.h"

namespace dtrain::parallel {

class NodeExchange {
 public:
  // `comm` may be null when one rank hosts every node.
  NodeExchange(comm::Communicator* comm, const NodeLayout& layout, const Graph& graph);

  // messages[h]: the message of this rank's h-th node (NodeLayout::local order), 1-D. Returns the
  // message of every node this rank hosts or hears from (an in-neighbour of one of its nodes), by
  // graph node.
  std::map<int, torch::Tensor> exchange(const std::vector<torch::Tensor>& messages) const;

 private:
  struct Peer {
    int rank;
    std::vector<int> send;  // nodes of this rank with an out-neighbour on `rank`, ascending
    std::vector<int> recv;  // nodes on `rank` with an out-neighbour here, ascending
  };
  comm::Communicator* comm_;
  NodeLayout layout_;
  std::vector<int> local_;
  std::vector<Peer> peers_;
};

}  // namespace dtrain::parallel
