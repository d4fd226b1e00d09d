// The Trainer on small synthetic problems: deterministic given a seed, an exact resume, early
// stop, user callbacks, and data_parallel through the trainer equal to one process on the union of
// the ranks' batches (with a strategy this test registers, which also shows that a new strategy
// needs no change to the trainer).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/parallel/Registry.h"
#include "dtrain/train/EarlyStop.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

config::RunConfig small_config() {
  auto c = testing::small_trainer_config("trainer-test");
  return c;
}

std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& entry : t.strategy().model_state()) out.push_back(entry.second.clone());
  return out;
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

TEST(Trainer, TwoRunsWithTheSameSeedGiveIdenticalNumbers) {
  Trainer a(small_config(), nullptr);
  Trainer b(small_config(), nullptr);
  const auto ra = a.fit();
  const auto rb = b.fit();
  EXPECT_EQ(ra.steps, 2 * 256 / 16);
  EXPECT_EQ(ra.final_eval.loss, rb.final_eval.loss);
  expect_equal(parameters_of(a), parameters_of(b));
  EXPECT_EQ(a.model_facts().initial_hash, b.model_facts().initial_hash);
  EXPECT_EQ(a.model_facts().parameters, 8 * 8 * 16 + 16 + 16 * 4 + 4);
  EXPECT_LT(ra.final_eval.loss, std::log(4.0));  // it learned something
}

TEST(Trainer, DataPartitionHashFollowsWorkersSeedAndPartitionOnly) {
  const auto labels = torch::arange(200, torch::kLong).remainder(10);
  config::DataConfig data;
  const auto base = data_partition_hash(2, data, labels, 7);
  config::DataConfig other_batch = data;
  other_batch.batch_size = 3;  // batching does not decide which samples a rank holds
  EXPECT_EQ(data_partition_hash(2, other_batch, labels, 7), base);
  EXPECT_NE(data_partition_hash(1, data, labels, 7), base);
  EXPECT_NE(data_partition_hash(2, data, labels, 8), base);
  config::DataConfig hetero = data;
  hetero.partition = "hetero";
  EXPECT_NE(data_partition_hash(2, hetero, labels, 7), base);
}

TEST(Trainer, ResumeContinuesExactly) {
  // k steps, checkpoint, a new trainer resumes: the same parameters as 2k steps straight.
  auto config = small_config();
  config.train.epochs = 3;
  Trainer straight(config, nullptr);
  straight.fit();

  Trainer first(config, nullptr);
  first.add_callback(std::make_shared<testing::StopAt>(21));  // mid-epoch: 16 batches per epoch
  first.fit();
  io::Checkpoint checkpoint;
  first.save_state(checkpoint);

  Trainer resumed(config, nullptr);
  resumed.load_state(checkpoint);
  EXPECT_EQ(resumed.step(), 21);
  resumed.fit();
  EXPECT_EQ(resumed.step(), straight.step());
  expect_equal(parameters_of(resumed), parameters_of(straight));
}

TEST(Trainer, ResumeWithinAnEpochReportsTheWholeEpochsTrainingMetrics) {
  // Two ranks, 8 batches per epoch; interrupted at step 21 (batch 5 of epoch 2) and resumed: the
  // last epoch's training metrics count all of its batches, as in the run that was not interrupted.
  auto config = small_config();
  config.train.epochs = 3;
  config.parallel.strategy = "data_parallel";
  std::vector<TrainResult> straight(2), resumed(2);
  std::vector<std::vector<torch::Tensor>> straight_params(2), resumed_params(2);
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    const auto r = comm->rank();
    Trainer whole(config, comm);
    straight[r] = whole.fit();
    straight_params[r] = parameters_of(whole);

    Trainer first(config, comm);
    first.add_callback(std::make_shared<testing::StopAt>(21));
    first.fit();
    io::Checkpoint checkpoint;
    first.save_state(checkpoint);  // collective: every rank's counts go into it
    Trainer second(config, comm);
    second.load_state(checkpoint);
    resumed[r] = second.fit();
    resumed_params[r] = parameters_of(second);
  });
  for (int r = 0; r < 2; ++r) {
    expect_equal(resumed_params[r], straight_params[r]);
    const auto& a = straight[r].last_train;
    const auto& b = resumed[r].last_train;
    EXPECT_EQ(a.samples, 256) << "rank " << r;
    EXPECT_EQ(b.samples, a.samples) << "rank " << r;
    EXPECT_EQ(b.top1, a.top1) << "rank " << r;
    EXPECT_EQ(b.top5, a.top5) << "rank " << r;
    EXPECT_EQ(b.f1, a.f1) << "rank " << r;
    EXPECT_NEAR(b.loss, a.loss, 1e-12) << "rank " << r;  // summed in another order
  }
}

// A user's callback sees every step, evaluation and epoch end, in order.
struct Recorder : Callback {
  void on_train_begin(Trainer&) override { events.push_back("begin"); }
  void on_step_end(Trainer&, const StepEvent& e) override {
    ++steps;
    last_step = e.step;
  }
  void on_evaluation(Trainer&, const EvalEvent& e) override {
    events.push_back("eval@" + std::to_string(e.step));
  }
  void on_epoch_end(Trainer&, const EpochEvent& e) override {
    events.push_back("epoch" + std::to_string(e.epoch) + "@" + std::to_string(e.step) + ":" +
                     std::to_string(e.train.samples));
  }
  void on_train_end(Trainer&, const TrainResult& r) override {
    events.push_back("end@" + std::to_string(r.steps));
  }
  std::vector<std::string> events;
  std::int64_t steps = 0;
  std::int64_t last_step = 0;
};

TEST(Trainer, UserCallbacksSeeStepsEvaluationsAndEpochEnds) {
  auto config = small_config();
  config.train.eval_every_steps = 10;
  config.train.eval_every_epochs = 1;
  Trainer t(config, nullptr);
  auto recorder = std::make_shared<Recorder>();
  t.add_callback(recorder);
  t.fit();
  EXPECT_EQ(recorder->steps, 32);
  EXPECT_EQ(recorder->last_step, 32);
  const std::vector<std::string> expected = {"begin",         "eval@10",       "eval@16",
                                             "epoch0@16:256", "eval@20",       "eval@30",
                                             "eval@32",       "epoch1@32:256", "end@32"};
  EXPECT_EQ(recorder->events, expected);
}

TEST(Trainer, EarlyStopEndsAtTheTargetAccuracy) {
  auto config = small_config();
  config.train.epochs = 50;
  config.train.eval_every_steps = 4;
  Trainer t(config, nullptr);
  t.add_callback(std::make_shared<EarlyStop>(0.01));
  const auto r = t.fit();
  EXPECT_TRUE(r.stopped_early);
  EXPECT_EQ(r.steps, 4);
  EXPECT_GE(r.final_eval.top1, 0.01);
}

// A strategy registered by this test: data_parallel that records every batch it trains on, and
// evaluates two models, the model on every rank's share and the same model on rank 1 alone over
// the whole set (as decentralized strategies evaluate nodes that live on one rank).
class RecordingDataParallel final : public parallel::Strategy {
 public:
  static std::vector<std::vector<data::Batch>>& batches() {
    static std::vector<std::vector<data::Batch>> b(2);
    return b;
  }

  explicit RecordingDataParallel(parallel::StrategyContext context)
      : rank_(context.comm->rank()), inner_([&] {
          context.parallel.strategy = "data_parallel";
          return parallel::create_strategy(std::move(context));
        }()) {}

  std::string name() const override { return "recording_data_parallel"; }
  parallel::StepResult train_step(const data::Batch& batch) override {
    batches()[rank_].push_back({batch.inputs.clone(), batch.targets.clone()});
    return inner_->train_step(batch);
  }
  void set_learning_rate(double lr) override { inner_->set_learning_rate(lr); }
  std::vector<parallel::EvalModel> eval_models() const override { return {{"model", -1}, {"on_rank1", 1}}; }
  void begin_evaluation() override { inner_->begin_evaluation(); }
  torch::Tensor eval_forward(std::size_t, const torch::Tensor& inputs) override {
    return inner_->eval_forward(0, inputs);
  }
  void end_evaluation() override { inner_->end_evaluation(); }
  std::map<std::string, torch::Tensor> model_state() const override { return inner_->model_state(); }
  void save(io::Checkpoint& checkpoint) const override { inner_->save(checkpoint); }
  void load(const io::Checkpoint& checkpoint) override { inner_->load(checkpoint); }
  comm::CommStats comm_stats() const override { return inner_->comm_stats(); }
  parallel::MemoryFootprint memory_footprint() const override { return inner_->memory_footprint(); }
  std::map<std::string, double> metrics() override {
    return {{"recorded_steps", double(batches()[rank_].size())}};
  }

 private:
  int rank_;
  std::unique_ptr<parallel::Strategy> inner_;
};

DTRAIN_REGISTER_STRATEGY(recording_data_parallel,
                         parallel::StrategyInfo{
                             "recording_data_parallel", "data_parallel that records its batches",
                             /*exact=*/false, /*needs_communicator=*/true,
                             [](parallel::StrategyContext c) -> std::unique_ptr<parallel::Strategy> {
                               return std::make_unique<RecordingDataParallel>(std::move(c));
                             }});

// Logs every evaluation the trainer reports.
struct Evaluations : Callback {
  void on_evaluation(Trainer&, const EvalEvent& e) override { events.push_back(e); }
  std::vector<EvalEvent> events;
};

TEST(Trainer, DataParallelThroughTheTrainerEqualsOneProcessOnTheUnionBatches) {
  auto config = small_config();
  config.parallel.strategy = "recording_data_parallel";
  config.train.epochs = 1;
  for (auto& b : RecordingDataParallel::batches()) b.clear();
  std::vector<std::vector<torch::Tensor>> params(2);
  std::vector<TrainResult> results(2);
  std::vector<std::shared_ptr<Evaluations>> evaluations(2);
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    Trainer t(config, comm);
    evaluations[comm->rank()] = std::make_shared<Evaluations>();
    t.add_callback(evaluations[comm->rank()]);
    results[comm->rank()] = t.fit();
    params[comm->rank()] = parameters_of(t);
  });
  const auto& recorded = RecordingDataParallel::batches();
  ASSERT_EQ(recorded[0].size(), 256u / (16 * 2));
  ASSERT_EQ(recorded[1].size(), recorded[0].size());

  // One process, same initial weights (same seed), each step on rank 0's batch then rank 1's.
  auto local_config = small_config();
  local_config.data.batch_size = 32;
  Trainer reference(local_config, nullptr);
  auto& local = reference.strategy();
  for (std::size_t s = 0; s < recorded[0].size(); ++s) {
    local.set_learning_rate(config.optim.lr);
    local.train_step({torch::cat({recorded[0][s].inputs, recorded[1][s].inputs}),
                      torch::cat({recorded[0][s].targets, recorded[1][s].targets})});
  }
  const auto expected = parameters_of(reference);
  ASSERT_EQ(params[0].size(), expected.size());
  for (int r = 0; r < 2; ++r) {
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[r][i], expected[i], 1e-5, 1e-6)) << "rank " << r << " tensor " << i;
    }
  }
  // Evaluation: 32 test samples split over the ranks for "model", all 32 on rank 1 for "on_rank1";
  // the same weights, so the same figures, reduced onto both ranks.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(evaluations[r]->events.size(), 1u);
    const auto& e = evaluations[r]->events[0];
    EXPECT_EQ(e.metrics.samples, 32);
    ASSERT_EQ(e.others.count("on_rank1"), 1u);
    EXPECT_EQ(e.others.at("on_rank1").samples, 32);
    EXPECT_EQ(e.others.at("on_rank1").top1, e.metrics.top1);
    EXPECT_NEAR(e.others.at("on_rank1").loss, e.metrics.loss, 1e-6);
    EXPECT_EQ(e.strategy_metrics.at("recorded_steps"), 8.0);
    EXPECT_EQ(results[r].final_strategy_metrics.at("recorded_steps"), 8.0);
  }
  EXPECT_GT(results[0].comm.ops.at("allreduce").calls, 0u);
}

}  // namespace
}  // namespace dtrain::train
