// AsyncExchange: gossip without a round barrier (parallel.decentralized.asynchronous). Every rank
// sends its nodes' states, stamped with their step, to the ranks hosting their out-neighbours
// without waiting for the receivers, and keeps the newest state that has arrived from each remote
// in-neighbour; the strategy mixes what is new enough (Note [Asynchronous gossip] in
// DecentralizedAlgorithms.cpp). settle() is the one synchronous operation: it ends every transfer
// in flight, so that a collective (evaluation, checkpoint, the end of the run) finds none.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/parallel/decentralized/Graph.h"
#include "dtrain/parallel/decentralized/NodeLayout.h"

namespace dtrain::parallel {

class AsyncExchange {
 public:
  // `comm` may be null when one rank hosts every node. `length`: the elements of one node's state.
  AsyncExchange(comm::Communicator* comm, const NodeLayout& layout, const Graph& graph, std::int64_t length,
                torch::TensorOptions options);
  ~AsyncExchange();
  AsyncExchange(const AsyncExchange&) = delete;
  AsyncExchange& operator=(const AsyncExchange&) = delete;

  // Whether receives are posted (between start() and settle()).
  bool running() const { return running_; }
  // Before the first round after construction or settle(): posts a receive for every peer rank
  // and sends the states stamped `step` (states[h]: this rank's h-th node's state, 1-D). Never
  // waits: a neighbour not heard from yet is left out until its first message arrives.
  void start(const std::vector<torch::Tensor>& states, std::int64_t step);
  // Sends the states stamped `step` to every peer rank that has taken this rank's previous message;
  // to a peer still taking it they go as soon as it has, from poll(), as the newest states then.
  // Never waits.
  void send(const std::vector<torch::Tensor>& states, std::int64_t step);
  // Takes every message that has arrived, without waiting, keeping the newest state per node, and
  // sends `states` stamped `step` to every peer a send() is owed to and that can now take it.
  // Throws CommError when a transfer failed (a peer died, or was silent for the communicator's
  // timeout).
  void poll(const std::vector<torch::Tensor>& states, std::int64_t step);
  // Synchronous: sends every peer a last message holding the states stamped `step`, takes every
  // peer's messages up to its last one, and waits until every send has been taken. Throws
  // CommError naming the rank that sent no last message within the communicator's timeout.
  void settle(const std::vector<torch::Tensor>& states, std::int64_t step);

  // The newest state received from remote graph node `node` and its step (-1: none yet).
  struct Newest {
    torch::Tensor state;
    std::int64_t step = -1;
  };
  const Newest& newest(int node) const { return newest_.at(node); }
  // States never sent because a newer one replaced them while the peer was still taking the
  // previous message.
  std::int64_t sends_superseded() const { return sends_superseded_; }

 private:
  struct Peer {
    int rank = 0;
    std::vector<int> send;  // this rank's nodes with an out-neighbour on `rank`, ascending
    std::vector<int> recv;  // nodes on `rank` with an out-neighbour here, ascending
    torch::Tensor inbox, outbox;
    comm::WorkPtr receiving, sending;
    bool owed = false;  // a send() found the previous message still in flight
    bool last_received = false, last_sent = false;
  };
  void post_receive(Peer& peer);
  void post_send(Peer& peer, const std::vector<torch::Tensor>& states, std::int64_t step, bool last);
  // Takes peer's completed receives; true if its last message arrived.
  void take(Peer& peer);
  [[noreturn]] void fail_settle(const std::vector<int>& silent) const;

  comm::Communicator* comm_;
  NodeLayout layout_;
  std::int64_t length_;
  std::vector<Peer> peers_;
  std::map<int, Newest> newest_;  // by remote graph node
  bool running_ = false;
  std::int64_t sends_superseded_ = 0;
};

}  // namespace dtrain::parallel
