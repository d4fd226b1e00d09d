// Neighbour exchange over send/recv; see NodeExchange.h.
#include "dtrain/parallel/decentralized/NodeExchange.h"

#include <set>

namespace dtrain::parallel {

NodeExchange::NodeExchange(comm::Communicator* comm, const NodeLayout& layout, const Graph& graph)
    : comm_(comm), layout_(layout) {
  const int me = comm ? comm->rank() : 0;
  local_ = layout.local(me);
  // A node's message goes to the hosts of its out-neighbours; it hears its in-neighbours (the same
  // nodes on an undirected graph). Both ends of a link derive the same lists from the same graph.
  std::map<int, std::set<int>> send, recv;
  for (int node : local_) {
    for (int neighbour : graph.out_neighbours(node)) {
      const int owner = layout.owner(neighbour);
      if (owner != me) send[owner].insert(node);
    }
    for (int neighbour : graph.in_neighbours(node)) {
      const int owner = layout.owner(neighbour);
      if (owner != me) recv[owner].insert(neighbour);
    }
  }
  std::set<int> ranks;
  for (const auto& entry : send) ranks.insert(entry.first);
  for (const auto& entry : recv) ranks.insert(entry.first);
  for (int rank : ranks) {
    peers_.push_back(
        Peer{rank, {send[rank].begin(), send[rank].end()}, {recv[rank].begin(), recv[rank].end()}});
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
    if (peer.recv.empty()) continue;  // a directed graph may send to a rank it hears nothing from
    works.push_back(comm_->recv(inbox.back(), peer.rank, /*tag=*/0, /*async_op=*/true));
  }
  std::vector<torch::Tensor> outbox;
  for (const auto& peer : peers_) {
    if (peer.send.empty()) continue;
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
