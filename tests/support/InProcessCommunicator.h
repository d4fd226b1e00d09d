// A test double for comm::Communicator: ranks are threads of one process meeting at a shared hub.
// Collectives run inline (async_op returns a finished Work), every call is logged per rank, and a
// call that does not match the other ranks' (operation or size) fails on every rank, so tests can
// assert that strategies issue the same collectives in the same order.
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"

namespace dtrain::testing {

struct LoggedCall {
  std::string op;
  std::int64_t numel;
  bool operator==(const LoggedCall& o) const { return op == o.op && numel == o.numel; }
};

class Hub {
 public:
  explicit Hub(int size) : size_(size), inputs_(size), calls_(size), log_(size) {}
  int size() const { return size_; }

  // Deposits this rank's call, waits for everyone, runs `compute` (which may read all ranks'
  // tensors), waits again so no rank overwrites its tensor while another still reads it, then runs
  // `write` on this rank.
  void collective(int rank, const LoggedCall& call, const at::Tensor& input,
                  const std::function<void(const std::vector<at::Tensor>&)>& compute,
                  const std::function<void()>& write) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      log_[rank].push_back(call);
    }
    inputs_[rank] = input;
    calls_[rank] = call;
    arrive();
    for (int r = 0; r < size_; ++r) {
      if (!(calls_[r] == calls_[0])) {
        arrive();
        throw std::runtime_error("mismatched collectives: rank 0 called " + calls_[0].op + "(" +
                                 std::to_string(calls_[0].numel) + "), rank " + std::to_string(r) +
                                 " called " + calls_[r].op + "(" + std::to_string(calls_[r].numel) + ")");
      }
    }
    compute(inputs_);
    arrive();
    write();
  }

  std::vector<LoggedCall> log(int rank) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_[rank];
  }

 private:
  void arrive() {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }

  int size_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<at::Tensor> inputs_;
  std::vector<LoggedCall> calls_;
  std::vector<std::vector<LoggedCall>> log_;
};

class InProcessCommunicator : public comm::Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Hub> hub, int rank)
      : comm::Communicator(rank, hub->size(), std::chrono::seconds(60)), hub_(std::move(hub)) {}

  std::string backend() const override { return "in-process"; }
  std::vector<LoggedCall> log() const { return hub_->log(rank()); }

 protected:
  comm::WorkPtr do_allreduce(const at::Tensor& tensor, comm::ReduceOp op, bool) override {
    TORCH_CHECK(op == comm::ReduceOp::Sum, "the in-process test communicator reduces with sum only");
    at::Tensor result;
    hub_->collective(
        rank(), {"allreduce", tensor.numel()}, tensor,
        [&](const std::vector<at::Tensor>& all) {
          // Summed in rank order on every rank, so all ranks get bit-identical results.
          result = all[0].clone();
          for (std::size_t r = 1; r < all.size(); ++r) result.add_(all[r]);
        },
        [&] { tensor.copy_(result); });
    return std::make_shared<comm::CompletedWork>();
  }
  comm::WorkPtr do_allgather(const at::Tensor& input, const at::Tensor& output, bool) override {
    at::Tensor result;
    hub_->collective(
        rank(), {"allgather", input.numel()}, input,
        [&](const std::vector<at::Tensor>& all) {
          std::vector<at::Tensor> flat;
          for (const auto& t : all) flat.push_back(t.reshape({-1}));
          result = at::cat(flat);
        },
        [&] { output.view({-1}).copy_(result); });
    return std::make_shared<comm::CompletedWork>();
  }
  comm::WorkPtr do_broadcast(const at::Tensor& tensor, int root, bool) override {
    at::Tensor result;
    hub_->collective(
        rank(), {"broadcast", tensor.numel()}, tensor,
        [&](const std::vector<at::Tensor>& all) { result = all[root].clone(); },
        [&] { tensor.copy_(result); });
    return std::make_shared<comm::CompletedWork>();
  }
  comm::WorkPtr do_barrier(bool) override {
    hub_->collective(
        rank(), {"barrier", 0}, at::Tensor(), [](const std::vector<at::Tensor>&) {}, [] {});
    return std::make_shared<comm::CompletedWork>();
  }
  comm::WorkPtr do_reduce_scatter(const at::Tensor& input, const at::Tensor& output, comm::ReduceOp op,
                                  bool) override {
    TORCH_CHECK(op == comm::ReduceOp::Sum, "the in-process test communicator reduces with sum only");
    at::Tensor result;
    hub_->collective(
        rank(), {"reduce_scatter", input.numel()}, input,
        [&](const std::vector<at::Tensor>& all) {
          // This rank's chunk, summed in rank order.
          const auto n = output.numel();
          result = all[0].reshape({-1}).narrow(0, rank() * n, n).clone();
          for (std::size_t r = 1; r < all.size(); ++r)
            result.add_(all[r].reshape({-1}).narrow(0, rank() * n, n));
        },
        [&] { output.view({-1}).copy_(result); });
    return std::make_shared<comm::CompletedWork>();
  }
  // The strategies under test use none of these; a call is a test bug, reported as such.
  comm::WorkPtr do_alltoall(const at::Tensor&, const at::Tensor&, bool) override { unused("alltoall"); }
  comm::WorkPtr do_send(const at::Tensor&, int, int, bool) override { unused("send"); }
  comm::WorkPtr do_recv(const at::Tensor&, int, int, bool) override { unused("recv"); }
  std::unique_ptr<comm::Communicator> do_split(const std::vector<int>&) override { unused("split"); }
  // Ranks read each other's tensors in memory: nothing goes on a wire.
  std::uint64_t wire_bytes(const comm::WireCall&) const override { return 0; }

 private:
  [[noreturn]] void unused(const std::string& op) const {
    fail(op,
         "the in-process test communicator offers allreduce, allgather, reduce_scatter, broadcast and "
         "barrier only");
  }

  std::shared_ptr<Hub> hub_;
};

}  // namespace dtrain::testing
