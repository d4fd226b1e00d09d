// The Trainer on small synthetic problems: deterministic given a seed, an exact resume, early
// stop, user callbacks, and data_parallel over two ranks ending with identical weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/train/EarlyStop.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"

namespace dtrain::train {
namespace {

config::RunConfig small_config() {
  config::RunConfig c;
  c.name = "trainer-test";
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = {1, 8, 8};
  c.data.synthetic_classes = 4;
  c.data.synthetic_size = 256;
  c.data.batch_size = 16;
  c.data.eval_batch_size = 64;
  c.data.test_subset_size = 32;
  c.model.name = "mlp";
  c.model.hidden = {16};
  c.optim.name = "adam";
  c.optim.lr = 0.01;
  c.parallel.strategy = "local";
  c.train.epochs = 2;
  c.train.seed = 7;
  c.train.log_every_steps = 0;
  return c;
}

std::vector<torch::Tensor> parameters_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.model().parameters()) out.push_back(p.detach().clone());
  return out;
}

void expect_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

// Stops the run after `at` steps, as an interruption would.
struct StopAt : Callback {
  explicit StopAt(std::int64_t at) : at(at) {}
  void on_step_end(Trainer& t, const StepEvent& e) override {
    if (e.step == at) t.request_stop("interrupted");
  }
  std::int64_t at;
};

TEST(Trainer, TwoRunsWithTheSameSeedGiveIdenticalNumbers) {
  Trainer a(small_config(), nullptr);
  Trainer b(small_config(), nullptr);
  const auto ra = a.fit();
  const auto rb = b.fit();
  EXPECT_EQ(ra.steps, 2 * 256 / 16);
  EXPECT_EQ(ra.final_eval.loss, rb.final_eval.loss);
  expect_equal(parameters_of(a), parameters_of(b));
  EXPECT_EQ(a.initial_parameter_hash(), b.initial_parameter_hash());
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
  first.add_callback(std::make_shared<StopAt>(21));  // mid-epoch: 16 batches per epoch
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
    first.add_callback(std::make_shared<StopAt>(21));
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

TEST(Trainer, DataParallelRanksEndWithIdenticalWeightsAndReducedMetrics) {
  auto config = small_config();
  config.parallel.strategy = "data_parallel";
  std::vector<std::vector<torch::Tensor>> params(2);
  std::vector<TrainResult> results(2);
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    Trainer t(config, comm);
    results[comm->rank()] = t.fit();
    params[comm->rank()] = parameters_of(t);
  });
  expect_equal(params[0], params[1]);
  EXPECT_EQ(results[0].steps, 2 * 256 / (16 * 2));
  EXPECT_EQ(results[0].final_eval.samples, 32);
  EXPECT_EQ(results[0].final_eval.top1, results[1].final_eval.top1);
  EXPECT_GT(results[0].comm.ops.at("allreduce").calls, 0u);
}

}  // namespace
}  // namespace dtrain::train
