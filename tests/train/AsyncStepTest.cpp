// The step that leaves its loss on the device (Note [Reading a step's figures]) against the one that
// reads it at every step (train.sync_every_step): the same weights bit for bit and the same logged
// figures, for local training and data_parallel on 2 ranks over gloo; and the trainer reads a
// step's loss only at the steps where something is logged, evaluated or checkpointed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/train/RunCallbacks.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

// Whether each step's loss was still unread when the callbacks saw it (first in line: nothing
// else has read it yet).
struct Pending : Callback {
  void on_step_end(Trainer&, const StepEvent& e) override { pending.push_back(e.loss.pending()); }
  std::vector<bool> pending;
};

struct RecordingSink : io::MetricsSink {
  void write(const io::MetricsRecord& record) override { records.push_back(record); }
  void flush() override {}
  std::vector<io::MetricsRecord> records;
};

struct Trained {
  std::vector<std::map<std::string, double>> logged;  // without the figures of time
  std::map<std::string, torch::Tensor> weights;
  EvalMetrics final_eval, last_train;
  std::vector<bool> pending;
};

config::RunConfig async_config(const std::string& strategy, bool sync) {
  auto c = testing::small_trainer_config("async");
  c.parallel.strategy = strategy;
  c.optim.name = "sgd";
  c.optim.momentum = 0.9;
  c.train.log_every_steps = 3;
  c.train.eval_every_steps = 5;
  c.train.sync_every_step = sync;
  return c;
}

Trained train(const config::RunConfig& config, comm::CommunicatorPtr comm) {
  Trainer trainer(config, comm);
  auto pending = std::make_shared<Pending>();
  auto sink = std::make_shared<RecordingSink>();
  trainer.add_callback(pending);
  trainer.add_callback(std::make_shared<MetricsLog>(sink, nullptr, config.train.log_every_steps));
  const auto result = trainer.fit();
  Trained run;
  for (const auto& record : sink->records) {
    std::map<std::string, double> scalars;
    for (const auto& [tag, value] : record.scalars) {
      if (tag.rfind("time/", 0) != 0 && tag != "train/samples_per_s") scalars[tag] = value;
    }
    scalars["step"] = static_cast<double>(record.step);
    run.logged.push_back(scalars);
  }
  run.weights = trainer.strategy().model_state();
  run.final_eval = result.final_eval;
  run.last_train = result.last_train;
  run.pending = pending->pending;
  return run;
}

void expect_same(const Trained& async, const Trained& sync) {
  ASSERT_EQ(async.logged.size(), sync.logged.size());
  for (std::size_t i = 0; i < sync.logged.size(); ++i)
    EXPECT_EQ(async.logged[i], sync.logged[i]) << "record " << i;
  for (const auto& [name, value] : sync.weights)
    EXPECT_TRUE(torch::equal(async.weights.at(name), value)) << name;
  EXPECT_EQ(async.final_eval.loss, sync.final_eval.loss);
  EXPECT_EQ(async.final_eval.top1, sync.final_eval.top1);
  EXPECT_EQ(async.last_train.loss, sync.last_train.loss);
  EXPECT_EQ(async.last_train.top1, sync.last_train.top1);
  EXPECT_EQ(async.last_train.f1, sync.last_train.f1);
  EXPECT_GT(async.last_train.loss, 0.0);
}

// 2 epochs of `per_epoch` steps, logged every 3, evaluated every 5: the loss is read at those steps
// and at each epoch's end, and nowhere else; with sync_every_step at every step.
void expect_reads(const Trained& async, const Trained& sync, std::int64_t per_epoch) {
  ASSERT_EQ(async.pending.size(), static_cast<std::size_t>(2 * per_epoch));
  for (std::size_t i = 0; i < async.pending.size(); ++i) {
    const auto step = static_cast<std::int64_t>(i + 1);
    const bool read = step % 3 == 0 || step % 5 == 0 || step % per_epoch == 0;
    EXPECT_EQ(async.pending[i], !read) << "step " << step;
    EXPECT_FALSE(sync.pending[i]) << "step " << step;
  }
}

TEST(AsyncStep, LocalEqualsTheStepThatReadsEveryLoss) {
  const auto async = train(async_config("local", false), nullptr);
  const auto sync = train(async_config("local", true), nullptr);
  expect_same(async, sync);
  expect_reads(async, sync, 256 / 16);
}

TEST(AsyncStep, DataParallelOnTwoRanksEqualsTheStepThatReadsEveryLoss) {
  std::map<bool, std::vector<Trained>> runs{{false, std::vector<Trained>(2)},
                                            {true, std::vector<Trained>(2)}};
  for (const bool sync : {false, true}) {
    auto& ranks = runs[sync];
    dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
      ranks[comm->rank()] = train(async_config("data_parallel", sync), comm);
    });
  }
  for (int r = 0; r < 2; ++r) {
    expect_same(runs[false][r], runs[true][r]);
    expect_reads(runs[false][r], runs[true][r], 256 / 2 / 16);
  }
}

}  // namespace
}  // namespace dtrain::train
