// Neighbour exchange over send/recv; see NodeExchange.h.
#include "dtrain/parallel/decentralized/NodeExchange.h"

#include <set>

namespace dtrain::parallel {

NodeExchange::NodeExchange(comm::Communicator* comm, const NodeLayout& layout, const Graph& graph)
    : comm_(comm), layout_(layout) {
  const int me = comm ? comm->rank() : 0;
  local_ = layout.local(me);
  // A node's message goes to the hosts of its out-neighbours; it hears its in-neighbours.
  for (auto& link : node_links(graph, layout, me))
    peers_.push_back(Peer{link.rank, std::move(link.send), std::move(link.recv)});
  TORCH_INTERNAL_ASSERT(peers_.empty() || comm_, "graph nodes on other ranks but no communicator");
}

std::map<int, torch::Tensor> NodeExchange::exchange(const std::vector<torch::Tensor>& messages) const {
  auto pending = post(messages);
  return finish(pending);
}

bool NodeExchange::Pending::done() const {
  for (const auto& work : works) {
    if (!work->completed()) return false;
  }
  return true;
}

NodeExchange::Pending NodeExchange::post(const std::vector<torch::Tensor>& messages) const {
  TORCH_INTERNAL_ASSERT(messages.size() == local_.size());
  Pending p;
  for (std::size_t h = 0; h < local_.size(); ++h) p.out[local_[h]] = messages[h];
  if (peers_.empty()) return p;
  const auto& first = messages.front();
  const auto n = first.numel();
  const int base = layout_.first(comm_->rank());
  // Receives first, then sends, posted as one batch: every transfer of the round is in flight
  // before any is waited on (on nccl, one group: Note [Grouped point-to-point] in comm/).
  std::vector<comm::P2POp> ops;
  for (const auto& peer : peers_) {
    p.inbox.push_back(torch::empty({static_cast<std::int64_t>(peer.recv.size()) * n}, first.options()));
    if (peer.recv.empty()) continue;  // a directed graph may send to a rank it hears nothing from
    ops.push_back({comm::P2POp::Kind::Recv, p.inbox.back(), peer.rank, /*tag=*/0});
  }
  for (const auto& peer : peers_) {
    if (peer.send.empty()) continue;
    std::vector<torch::Tensor> parts;
    for (int node : peer.send) parts.push_back(messages[static_cast<std::size_t>(node - base)].reshape({-1}));
    p.outbox.push_back(torch::cat(parts));
    ops.push_back({comm::P2POp::Kind::Send, p.outbox.back(), peer.rank, /*tag=*/0});
  }
  p.works = comm_->batch_isend_irecv(ops);
  return p;
}

std::map<int, torch::Tensor> NodeExchange::finish(Pending& p) const {
  for (auto& work : p.works) work->wait();
  p.works.clear();
  if (p.inbox.empty()) return std::move(p.out);
  const auto n = p.out.begin()->second.numel();
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    for (std::size_t k = 0; k < peers_[i].recv.size(); ++k) {
      p.out[peers_[i].recv[k]] = p.inbox[i].narrow(0, static_cast<std::int64_t>(k) * n, n);
    }
  }
  return std::move(p.out);
}

}  // namespace dtrain::parallel
