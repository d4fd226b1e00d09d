// The pipeline's transfers kept moving between layers: every outstanding send and posted receive
// polled after each layer's forward and backward (Note [Transfers kept moving between layers]).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/pipeline/PipelineSchedule.h"
#include "dtrain/parallel/pipeline/PipelineStrategy.h"
#include "dtrain/parallel/pipeline/StagePartition.h"
#include "parallel/ParallelTestUtil.h"
#include "parallel/pipeline/PipelineChecks.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel::pipeline {
namespace {

using Pass = PipelineAction::Pass;
using namespace checks;

// ---------------------------------------------------------------------------------------------
// Transfers kept moving between layers

// The most polls any one send or recv Work of a rank received. A wait polls its Work once
// (Communicator's handle skips timing what already finished); polls between layers repeat.
struct PollCounts {
  std::atomic<int> most_of_a_send{0};
  std::atomic<int> most_of_a_receive{0};
};

class CountedWork final : public comm::Work {
 public:
  CountedWork(comm::WorkPtr inner, std::atomic<int>* most) : inner_(std::move(inner)), most_(most) {}
  bool completed() override { return inner_->completed(); }
  void wait() override { inner_->wait(); }
  bool poll() override {
    const int polls = ++polls_;
    int most = most_->load();
    while (polls > most && !most_->compare_exchange_weak(most, polls)) {
    }
    return inner_->poll();
  }

 private:
  comm::WorkPtr inner_;
  std::atomic<int>* most_;
  int polls_ = 0;
};

// A communicator that passes every call to `inner` (and its splits to theirs) and counts the polls
// of its send and recv Works (PollCounts).
class PollCountingCommunicator final : public comm::Communicator {
 public:
  PollCountingCommunicator(std::shared_ptr<comm::Communicator> inner, std::shared_ptr<PollCounts> counts)
      : Communicator(inner->rank(), inner->size(), inner->timeout()),
        inner_(std::move(inner)),
        counts_(std::move(counts)) {}
  std::string backend() const override { return inner_->backend(); }

 protected:
  comm::WorkPtr do_allreduce(const at::Tensor& t, comm::ReduceOp op, bool async_op) override {
    return inner_->allreduce(t, op, async_op);
  }
  comm::WorkPtr do_allgather(const at::Tensor& in, const at::Tensor& out, bool async_op) override {
    return inner_->allgather(in, out, async_op);
  }
  comm::WorkPtr do_broadcast(const at::Tensor& t, int root, bool async_op) override {
    return inner_->broadcast(t, root, async_op);
  }
  comm::WorkPtr do_reduce_scatter(const at::Tensor& in, const at::Tensor& out, comm::ReduceOp op,
                                  bool async_op) override {
    return inner_->reduce_scatter(in, out, op, async_op);
  }
  comm::WorkPtr do_alltoall(const at::Tensor& in, const at::Tensor& out, bool async_op) override {
    return inner_->alltoall(in, out, async_op);
  }
  comm::WorkPtr do_send(const at::Tensor& t, int dst, int tag, bool async_op) override {
    return counted(inner_->send(t, dst, tag, async_op), &counts_->most_of_a_send);
  }
  comm::WorkPtr do_recv(const at::Tensor& t, int src, int tag, bool async_op) override {
    return counted(inner_->recv(t, src, tag, async_op), &counts_->most_of_a_receive);
  }
  comm::WorkPtr do_barrier(bool async_op) override { return inner_->barrier(async_op); }
  std::unique_ptr<comm::Communicator> do_split(const std::vector<int>& ranks) override {
    std::shared_ptr<comm::Communicator> part = inner_->split(ranks);
    if (!part) return nullptr;
    return std::make_unique<PollCountingCommunicator>(std::move(part), counts_);
  }
  std::uint64_t wire_bytes(const comm::WireCall& call) const override {
    return call.numel * call.element_size;
  }

 private:
  static comm::WorkPtr counted(comm::WorkPtr work, std::atomic<int>* polls) {
    if (!work) return work;
    return std::make_shared<CountedWork>(std::move(work), polls);
  }

  std::shared_ptr<comm::Communicator> inner_;
  std::shared_ptr<PollCounts> counts_;
};

// Note [Transfers kept moving between layers]: while a step runs, a stage tests its outstanding
// transfers after each layer's forward and backward. Gloo's send Work never answers a poll with
// true (Gloo's own threads move its bytes), so each round stops at the step's first send, which is
// polled again and again until the step waits for it. Stage 0 sends first in its first forward:
// every layer of the M - 1 forwards after it polls that send. Under gpipe the last stage sends
// only in its backward passes (micro-batch m's gradient), so only the backward hooks can poll:
// each layer of micro-batch m + 1's backward that computes a gradient. With no send outstanding,
// the receives posted ahead are polled.
TEST(PipelineTransfers, OutstandingSendsArePolledAfterEveryLayerForwardAndBackward) {
  constexpr int kMicroBatches = 4;
  const auto cfg = config_of("pipeline", "sgd", pipeline_options(ScheduleKind::GPipe, 2, kMicroBatches));
  const auto data = make_data(1, 16, torch::kFloat);
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 1), testing::build_model(cfg, 1)};
  std::vector<std::shared_ptr<PollCounts>> counts{std::make_shared<PollCounts>(),
                                                  std::make_shared<PollCounts>()};
  std::vector<int> layers(2);
  std::vector<int> in_step(2);
  std::vector<int> receives_in_step(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto counting = std::make_shared<PollCountingCommunicator>(comm, counts[r]);
    auto strategy = testing::build_strategy(cfg, models[r], counting);
    const auto& layout = dynamic_cast<PipelineStrategy&>(*strategy).layout();
    layers[r] = layout.bounds.at(layout.stage + 1) - layout.bounds.at(layout.stage);
    strategy->train_step(slice(data, 0, r, 8));
    in_step[r] = counts[r]->most_of_a_send.exchange(0);
    receives_in_step[r] = counts[r]->most_of_a_receive.exchange(0);
    // Outside a step nothing polls between layers: evaluation's transfers are polled by their
    // waits alone.
    strategy->begin_evaluation();
    if (r == strategy->eval_models().front().owner) strategy->eval_forward(0, data.inputs[0]);
    strategy->end_evaluation();
    EXPECT_LE(counts[r]->most_of_a_send.load(), 1) << "rank " << r;
    EXPECT_LE(counts[r]->most_of_a_receive.load(), 1) << "rank " << r;
  });
  EXPECT_GE(in_step[0], (kMicroBatches - 1) * layers[0]);
  EXPECT_GE(in_step[1], kMicroBatches - 1);
  // The last stage sends nothing during its forwards, so they poll the activation it posted ahead.
  EXPECT_GE(receives_in_step[1], layers[1]);
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
