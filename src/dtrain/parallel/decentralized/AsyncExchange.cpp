// Stamped, unwaited gossip over tagged send/recv; see AsyncExchange.h and Note [Asynchronous gossip].
#include "dtrain/parallel/decentralized/AsyncExchange.h"

#include <fmt/format.h>

#include <chrono>
#include <set>
#include <thread>

namespace dtrain::parallel {
namespace {

// A message: kHeader numbers, then the states of the sender's nodes the receiver hears, in node
// order. The header holds the step as four base-256 digits and whether the message is the
// sender's last before a settle; numbers below 256 are exact in every floating type a state may
// have (bf16 and fp16 included), so the header travels in the states' own dtype.
constexpr std::int64_t kHeader = 5;
constexpr std::int64_t kMaxStep = std::int64_t{1} << 32;
// The synchronous exchange (NodeExchange) uses tag 0; these messages never match its receives.
constexpr int kTag = 1;

void write_header(torch::Tensor& message, std::int64_t step, bool last) {
  TORCH_CHECK(step >= 0 && step < kMaxStep, "asynchronous gossip: step ", step, " does not fit a message");
  auto header = message.narrow(0, 0, kHeader);
  for (int d = 0; d < 4; ++d) header[d].fill_(static_cast<double>((step >> (8 * d)) & 0xff));
  header[4].fill_(last ? 1.0 : 0.0);
}

std::pair<std::int64_t, bool> read_header(const torch::Tensor& message) {
  const auto header = message.narrow(0, 0, kHeader).to(torch::kDouble);
  const auto* h = header.data_ptr<double>();
  std::int64_t step = 0;
  for (int d = 0; d < 4; ++d) step |= static_cast<std::int64_t>(h[d]) << (8 * d);
  return {step, h[4] != 0.0};
}

}  // namespace

AsyncExchange::AsyncExchange(comm::Communicator* comm, const NodeLayout& layout, const Graph& graph,
                             std::int64_t length, torch::TensorOptions options)
    : comm_(comm), layout_(layout), length_(length) {
  const int me = comm ? comm->rank() : 0;
  for (auto& link : node_links(graph, layout, me)) {
    Peer peer;
    peer.rank = link.rank;
    peer.send = std::move(link.send);
    peer.recv = std::move(link.recv);
    const auto in = static_cast<std::int64_t>(peer.recv.size());
    const auto out = static_cast<std::int64_t>(peer.send.size());
    if (in > 0) peer.inbox = torch::empty({kHeader + in * length}, options);
    if (out > 0) peer.outbox = torch::empty({kHeader + out * length}, options);
    for (int node : peer.recv) newest_[node] = Newest{torch::zeros({length}, options), -1};
    peers_.push_back(std::move(peer));
  }
  TORCH_INTERNAL_ASSERT(peers_.empty() || comm_, "graph nodes on other ranks but no communicator");
}

AsyncExchange::~AsyncExchange() = default;

void AsyncExchange::post_receive(Peer& peer) {
  peer.receiving = comm_->recv(peer.inbox, peer.rank, kTag, /*async_op=*/true);
}

void AsyncExchange::post_send(Peer& peer, const std::vector<torch::Tensor>& states, std::int64_t step,
                              bool last) {
  write_header(peer.outbox, step, last);
  const int base = layout_.first(comm_->rank());
  for (std::size_t k = 0; k < peer.send.size(); ++k) {
    peer.outbox.narrow(0, kHeader + static_cast<std::int64_t>(k) * length_, length_)
        .copy_(states.at(static_cast<std::size_t>(peer.send[k] - base)).reshape({-1}));
  }
  peer.sending = comm_->send(peer.outbox, peer.rank, kTag, /*async_op=*/true);
  // Asked once now, so that a backend that learns of completion only by waiting (c10d Gloo's
  // send, Note [Gloo's send and recv]) starts waiting at once, and the next step finds it done.
  peer.sending->completed();
}

void AsyncExchange::start(const std::vector<torch::Tensor>& states, std::int64_t step) {
  TORCH_INTERNAL_ASSERT(!running_);
  for (auto& peer : peers_) {
    if (!peer.recv.empty()) post_receive(peer);
  }
  running_ = true;
  send(states, step);
}

void AsyncExchange::send(const std::vector<torch::Tensor>& states, std::int64_t step) {
  TORCH_INTERNAL_ASSERT(running_);
  for (auto& peer : peers_) {
    if (peer.send.empty()) continue;
    if (peer.sending && !peer.sending->completed()) {
      if (peer.owed) ++sends_superseded_;
      peer.owed = true;
      continue;
    }
    post_send(peer, states, step, /*last=*/false);
    peer.owed = false;
  }
}

void AsyncExchange::take(Peer& peer) {
  // Messages between two ranks arrive in the order they were sent, so the last one ends the loop.
  while (peer.receiving && peer.receiving->completed()) {
    const auto [step, last] = read_header(peer.inbox);
    for (std::size_t k = 0; k < peer.recv.size(); ++k) {
      auto& newest = newest_.at(peer.recv[k]);
      if (step <= newest.step) continue;
      newest.state.copy_(peer.inbox.narrow(0, kHeader + static_cast<std::int64_t>(k) * length_, length_));
      newest.step = step;
    }
    if (last) {
      peer.receiving.reset();
      peer.last_received = true;
    } else {
      post_receive(peer);
    }
  }
}

void AsyncExchange::poll(const std::vector<torch::Tensor>& states, std::int64_t step) {
  TORCH_INTERNAL_ASSERT(running_);
  for (auto& peer : peers_) {
    take(peer);
    if (peer.owed && peer.sending->completed()) {
      post_send(peer, states, step, /*last=*/false);
      peer.owed = false;
    }
  }
}

void AsyncExchange::settle(const std::vector<torch::Tensor>& states, std::int64_t step) {
  if (peers_.empty()) {
    running_ = false;
    return;
  }
  // A peer may have settled first, its last message already taken while this rank still ran.
  for (auto& peer : peers_) {
    if (!peer.recv.empty() && !peer.receiving && !peer.last_received) post_receive(peer);
  }
  // The last message carries the newest states: nothing owed is sent before it.
  for (auto& peer : peers_) peer.owed = false;
  // Every wait below is a poll: a rank must keep taking its peers' messages while its own wait
  // for a peer to take one, or two ranks whose receives are both full would wait on each other.
  const auto deadline = std::chrono::steady_clock::now() + comm_->timeout();
  for (;;) {
    bool done = true;
    for (auto& peer : peers_) {
      take(peer);
      if (!peer.send.empty() && !peer.last_sent && (!peer.sending || peer.sending->completed())) {
        post_send(peer, states, step, /*last=*/true);
        peer.last_sent = true;
      }
      const bool received = peer.recv.empty() || peer.last_received;
      const bool sent = peer.send.empty() || (peer.last_sent && peer.sending->completed());
      done = done && received && sent;
    }
    if (done) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<int> silent;
      for (const auto& peer : peers_) {
        if (!peer.recv.empty() && !peer.last_received) silent.push_back(peer.rank);
      }
      fail_settle(silent);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (auto& peer : peers_) {
    peer.sending.reset();
    peer.receiving.reset();
    peer.last_received = peer.last_sent = false;
  }
  running_ = false;
}

void AsyncExchange::fail_settle(const std::vector<int>& silent) const {
  const auto seconds = std::chrono::duration<double>(comm_->timeout()).count();
  std::string ranks;
  for (int r : silent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw comm::CommError(
      comm_->rank(), comm_->size(), "asynchronous gossip (settle)",
      silent.empty()
          ? fmt::format("a peer took no last message within {:.0f} s (parallel.timeout_s)", seconds)
          : fmt::format("no last message from rank {} within {:.0f} s (parallel.timeout_s)", ranks, seconds));
}

}  // namespace dtrain::parallel
