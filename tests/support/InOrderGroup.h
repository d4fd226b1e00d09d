// NCCL's point-to-point semantics in one process, for tests on machines without two GPUs: a c10d
// process group (InOrderGroup) whose ranks are threads meeting in an InOrderFabric, and a
// C10dCommunicator over it (in_order_world). As on NCCL:
// - each rank runs its operations one at a time, in the order they were posted (a CUDA stream);
// - a send finishes only when its receiver has taken it, a receive when its sender's message has
//   come; messages between two ranks are matched in the order they were posted, whatever their tags;
// - the sends and receives between startCoalescing and endCoalescing (ncclGroupStart ...
//   ncclGroupEnd) are one operation: all are posted at once, and all finish together.
// Where NCCL would hang (every rank in an operation that waits on another rank's), every waiting
// operation fails with "deadlock", so that a test sees the hang as an error instead of a timeout.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/c10d/C10dCommunicator.h"

namespace dtrain::testing {

// A c10d Work that the fabric finishes.
class InOrderWork final : public ::c10d::Work {
 public:
  void done(std::exception_ptr error = nullptr) { finish(std::move(error)); }
};

class InOrderFabric {
 public:
  struct Transfer {
    bool send = false;
    int peer = 0;
    at::Tensor tensor;
  };
  struct Operation {
    std::vector<Transfer> transfers;
    std::vector<c10::intrusive_ptr<InOrderWork>> works;  // finished with the operation
  };

  explicit InOrderFabric(int size) : streams_(static_cast<std::size_t>(size)) {
    for (int r = 0; r < size; ++r) workers_.emplace_back([this, r] { run(r); });
  }
  ~InOrderFabric() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (auto& worker : workers_) worker.join();
  }
  InOrderFabric(const InOrderFabric&) = delete;
  InOrderFabric& operator=(const InOrderFabric&) = delete;

  int size() const { return static_cast<int>(streams_.size()); }

  // Queues `operation` on rank's stream, behind the operations posted before it.
  void post(int rank, Operation operation) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      streams_[static_cast<std::size_t>(rank)].queue.push_back(std::move(operation));
    }
    changed_.notify_all();
  }

 private:
  struct Message {
    at::Tensor bytes;
    std::shared_ptr<bool> taken;
  };
  struct Running {
    Operation operation;
    std::vector<std::size_t> receives;        // indices of the transfers still to receive
    std::vector<std::shared_ptr<bool>> sent;  // one per send, true once its receiver took it
  };
  struct Stream {
    std::deque<Operation> queue;
    std::unique_ptr<Running> running;
  };

  // Takes every message rank's running operation can take; true when the operation has finished.
  bool advance(int rank) {
    auto& running = *streams_[static_cast<std::size_t>(rank)].running;
    std::vector<std::size_t> still;
    for (std::size_t i : running.receives) {
      auto& transfer = running.operation.transfers[i];
      auto& wire = wires_[{transfer.peer, rank}];
      if (wire.empty()) {
        still.push_back(i);
        continue;
      }
      transfer.tensor.copy_(wire.front().bytes);
      *wire.front().taken = true;
      wire.pop_front();
      changed_.notify_all();
    }
    running.receives = std::move(still);
    if (!running.receives.empty()) return false;
    for (const auto& sent : running.sent) {
      if (!*sent) return false;
    }
    return true;
  }

  // Whether any rank's running operation can move now: take a message, or finish because its
  // messages have all been taken.
  bool anyone_can_move() const {
    for (int r = 0; r < size(); ++r) {
      const auto& running = streams_[static_cast<std::size_t>(r)].running;
      if (!running) continue;
      bool sent = true;
      for (const auto& taken : running->sent) sent = sent && *taken;
      if (running->receives.empty() && sent) return true;
      for (std::size_t i : running->receives) {
        const auto it = wires_.find({running->operation.transfers[i].peer, r});
        if (it != wires_.end() && !it->second.empty()) return true;
      }
    }
    return false;
  }

  void start(int rank) {
    auto& stream = streams_[static_cast<std::size_t>(rank)];
    stream.running = std::make_unique<Running>();
    stream.running->operation = std::move(stream.queue.front());
    stream.queue.pop_front();
    auto& transfers = stream.running->operation.transfers;
    for (std::size_t i = 0; i < transfers.size(); ++i) {
      if (!transfers[i].send) {
        stream.running->receives.push_back(i);
        continue;
      }
      auto taken = std::make_shared<bool>(false);
      wires_[{rank, transfers[i].peer}].push_back(Message{transfers[i].tensor.clone(), taken});
      stream.running->sent.push_back(taken);
    }
    changed_.notify_all();
  }

  void finish_running(int rank, std::exception_ptr error) {
    auto& stream = streams_[static_cast<std::size_t>(rank)];
    for (auto& work : stream.running->operation.works) work->done(error);
    stream.running.reset();
  }

  void run(int rank) {
    auto& stream = streams_[static_cast<std::size_t>(rank)];
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!stream.running) {
        if (stream.queue.empty()) {
          if (stopping_) return;
          changed_.wait(lock);
          continue;
        }
        start(rank);
      }
      if (advance(rank)) {
        finish_running(rank, nullptr);
        changed_.notify_all();
        continue;
      }
      if (deadlocked_ || stopping_) {
        finish_running(rank, std::make_exception_ptr(std::runtime_error(
                                 "deadlock: every rank waits in a send or receive that another rank's "
                                 "operation, posted before it, keeps from being matched")));
        continue;
      }
      // Stuck: if every rank is, and none can move, nothing ever will.
      if (++stuck_ == size() && !anyone_can_move()) {
        deadlocked_ = true;
        changed_.notify_all();
        --stuck_;
        continue;
      }
      changed_.wait(lock);
      --stuck_;
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Stream> streams_;
  std::map<std::pair<int, int>, std::deque<Message>> wires_;  // (from, to): messages not yet taken
  int stuck_ = 0;
  bool deadlocked_ = false;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// One rank's process group on an InOrderFabric: send, recv and grouping, nothing else.
class InOrderGroup final : public comm::compat::CollectiveGroup {
 public:
  InOrderGroup(std::shared_ptr<InOrderFabric> fabric, int rank)
      : comm::compat::CollectiveGroup(rank, fabric->size()), fabric_(std::move(fabric)) {}

  const std::string getBackendName() const override { return "in-order"; }

  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int) override {
    return transfer(true, tensors.at(0), dst);
  }
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int) override {
    return transfer(false, tensors.at(0), src);
  }

  void startCoalescing() override {
    TORCH_CHECK(!group_, "startCoalescing inside a group");
    group_ = std::make_unique<InOrderFabric::Operation>();
  }
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<::c10d::Work> endCoalescing() override {
    auto whole = c10::make_intrusive<InOrderWork>();
    end_group(whole);
    return whole;
  }
#else
  void endCoalescing(std::vector<c10::intrusive_ptr<::c10d::Work>>&) override {
    end_group(c10::intrusive_ptr<InOrderWork>());
  }
#endif

 private:
  c10::intrusive_ptr<::c10d::Work> transfer(bool send, const at::Tensor& tensor, int peer) {
    auto work = c10::make_intrusive<InOrderWork>();
    if (group_) {
      group_->transfers.push_back({send, peer, tensor});
      group_->works.push_back(work);
      return work;
    }
    InOrderFabric::Operation operation;
    operation.transfers.push_back({send, peer, tensor});
    operation.works.push_back(work);
    fabric_->post(getRank(), std::move(operation));
    return work;
  }

  void end_group(const c10::intrusive_ptr<InOrderWork>& whole) {
    TORCH_CHECK(group_, "endCoalescing without startCoalescing");
    auto operation = std::move(*group_);
    group_.reset();
    if (whole) operation.works.push_back(whole);
    fabric_->post(getRank(), std::move(operation));
  }

  std::shared_ptr<InOrderFabric> fabric_;
  std::unique_ptr<InOrderFabric::Operation> group_;
};

// Rank `rank`'s communicator over the fabric; `grouped`: C10dCapabilities::groups_p2p, as nccl sets it.
inline std::unique_ptr<comm::Communicator> in_order_communicator(const std::shared_ptr<InOrderFabric>& fabric,
                                                                 int rank, bool grouped) {
  comm::C10dCapabilities capabilities;
  capabilities.groups_p2p = grouped;
  capabilities.p2p_completes_without_wait = true;
  capabilities.wire_bytes = [](const comm::WireCall&, int, int) -> std::uint64_t { return 0; };
  comm::GroupFactory no_splits = [](const comm::compat::StorePtr&, int, int) -> comm::compat::GroupPtr {
    throw std::logic_error("the in-order test group does not split");
  };
  return std::make_unique<comm::C10dCommunicator>(
      "in-order", rank, fabric->size(), std::chrono::seconds(60), c10::make_intrusive<::c10d::HashStore>(),
      c10::make_intrusive<InOrderGroup>(fabric, rank), std::move(no_splits), capabilities);
}

}  // namespace dtrain::testing
