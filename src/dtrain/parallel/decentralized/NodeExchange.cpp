// Neighbour exchange over send/recv; see NodeExchange.h.
#include "dtrain/parallel/decentralized/NodeExchange.h"

#include <set>

namespace dtrain::parallel {

NodeExchange::NodeExchange(comm::Communicator* comm, const NodeLayout& layout, const Graph& graph)
    : comm_(comm), layout_(layout) {
  const int me = comm ? comm->rank() : 0;
  local_ = layout.local(me);
  std::map<int, std::set<int>> send, recv;
  for (int node : local_) {
    for (int neighbour : graph.neighbours(node)) {
      const int owner = layout.owner(neighbour);
      if (owner == me) continue;
      send[owner].insert(node);
      recv[owner].insert(neighbour);
    }
  }
  for (const auto& [rank, nodes] : send) {
    peers_.push_back(Peer{rank, {nodes.begin(), nodes.end()}, {recv[rank].begin(), recv[rank].end()}});
  }
  TORCH_INTERNAL_ASSERT(peers_.empty() || comm_, "graph nodes on other ranks but no communicator");
}

std::map<int, torch::Tensor> NodeExchange::exchange(const std::vector<torch::Tensor>& messages) const {
  TORCH_INTERNAL_ASSERT(messages.size() == local_.size());
  std::map<int, torch::Tensor> out;
  for (std::size_t h = 0; h < local_.size(); ++h) out[local_[h]] = messages[h];
  if (peers_.empty()) return out;
  const auto& first = messages.front();
  const auto n = first.numel();
  const int base = layout_.first(comm_->rank());
  std::vector<torch::Tensor> inbox;
  std::vector<comm::WorkPtr> works;
  // Receives first, then sends: every transfer of the round is posted before any is waited on.
  for (const auto& peer : peers_) {
    inbox.push_back(torch::empty({static_cast<std::int64_t>(peer.recv.size()) * n}, first.options()));
    works.push_back(comm_->recv(inbox.back(), peer.rank, /*tag=*/0, /*async_op=*/true));
  }
  std::vector<torch::Tensor> outbox;
  for (const auto& peer : peers_) {
    std::vector<torch::Tensor> parts;
    for (int node : peer.send) parts.push_back(messages[static_cast<std::size_t>(node - base)].reshape({-1}));
    outbox.push_back(torch::cat(parts));
    works.push_back(comm_->send(outbox.back(), peer.rank, /*tag=*/0, /*async_op=*/true));
  }
  for (auto& work : works) work->wait();
  for (std::size_t p = 0; p < peers_.size(); ++p) {
    for (std::size_t i = 0; i < peers_[p].recv.size(); ++i) {
      out[peers_[p].recv[i]] = inbox[p].narrow(0, static_cast<std::int64_t>(i) * n, n);
    }
  }
  return out;
}

}  // namespace dtrain::parallel
