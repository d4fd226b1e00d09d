// Each step's time split and bytes sent, from the strategy to the trainer's StepEvent and
// TrainResult and to the scalars MetricsLog writes (time/forward_s, time/backward_s, time/comm_s,
// time/update_s, comm/bytes_per_step), for local training and data_parallel over gloo.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/train/RunCallbacks.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"

namespace dtrain::train {
namespace {

config::RunConfig small_config(const std::string& strategy) {
  config::RunConfig c;
  c.name = "step-accounting";
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = {1, 8, 8};
  c.data.synthetic_classes = 4;
  c.data.synthetic_size = 256;
  c.data.batch_size = 16;
  c.data.test_subset_size = 32;
  c.model.name = "mlp";
  c.model.hidden = {16};
  c.optim.name = "adam";
  c.optim.lr = 0.01;
  c.parallel.strategy = strategy;
  c.train.epochs = 1;
  c.train.seed = 7;
  c.train.log_every_steps = 0;
  return c;
}

struct Steps : Callback {
  void on_step_end(Trainer&, const StepEvent& e) override { events.push_back(e); }
  std::vector<StepEvent> events;
};

// Keeps what MetricsLog writes.
struct RecordingSink : io::MetricsSink {
  void write(const io::MetricsRecord& record) override { records.push_back(record); }
  void flush() override {}
  std::vector<io::MetricsRecord> records;
};

void expect_events_add_up(const std::vector<StepEvent>& events, const TrainResult& result) {
  ASSERT_EQ(static_cast<std::int64_t>(events.size()), result.steps_run);
  parallel::StepTiming sum;
  std::uint64_t bytes = 0;
  for (const auto& e : events) {
    EXPECT_GT(e.timing.forward, 0.0) << "step " << e.step;
    EXPECT_GT(e.timing.backward, 0.0) << "step " << e.step;
    EXPECT_GE(e.timing.communication, 0.0) << "step " << e.step;
    EXPECT_GE(e.timing.update, 0.0) << "step " << e.step;
    EXPECT_LE(e.timing.total(), e.step_seconds) << "step " << e.step;
    sum += e.timing;
    bytes += e.bytes_sent;
  }
  EXPECT_DOUBLE_EQ(result.step_time.forward, sum.forward);
  EXPECT_DOUBLE_EQ(result.step_time.backward, sum.backward);
  EXPECT_DOUBLE_EQ(result.step_time.communication, sum.communication);
  EXPECT_DOUBLE_EQ(result.step_time.update, sum.update);
  EXPECT_EQ(result.bytes_sent, bytes);
}

TEST(StepAccounting, LocalStepsSendNothingAndTheResultSumsTheirPhases) {
  Trainer trainer(small_config("local"), nullptr);
  auto steps = std::make_shared<Steps>();
  trainer.add_callback(steps);
  const auto result = trainer.fit();
  EXPECT_EQ(result.steps_run, 256 / 16);
  expect_events_add_up(steps->events, result);
  EXPECT_EQ(result.bytes_sent, 0u);
  EXPECT_EQ(result.step_time.communication, 0.0);
}

TEST(StepAccounting, MetricsLogWritesEachPhaseAndTheBytesAveragedOverItsInterval) {
  Trainer trainer(small_config("local"), nullptr);
  auto steps = std::make_shared<Steps>();
  auto sink = std::make_shared<RecordingSink>();
  trainer.add_callback(steps);
  trainer.add_callback(std::make_shared<MetricsLog>(sink, nullptr, /*every_steps=*/4));
  trainer.fit();
  std::vector<std::map<std::string, double>> logged;
  for (const auto& record : sink->records) {
    std::map<std::string, double> scalars(record.scalars.begin(), record.scalars.end());
    if (scalars.count("train/loss")) logged.push_back(scalars);
  }
  ASSERT_EQ(logged.size(), 4u);  // 16 steps, every 4
  const auto& last = logged.back();
  parallel::StepTiming sum;
  double seconds = 0;
  for (std::size_t i = 12; i < 16; ++i) {
    sum += steps->events[i].timing;
    seconds += steps->events[i].step_seconds;
  }
  EXPECT_DOUBLE_EQ(last.at("time/forward_s"), sum.forward / 4);
  EXPECT_DOUBLE_EQ(last.at("time/backward_s"), sum.backward / 4);
  EXPECT_DOUBLE_EQ(last.at("time/comm_s"), 0.0);
  EXPECT_DOUBLE_EQ(last.at("time/update_s"), sum.update / 4);
  EXPECT_DOUBLE_EQ(last.at("time/step_s"), seconds / 4);
  EXPECT_EQ(last.at("comm/bytes_per_step"), 0.0);
}

// mlp [16] on 8x8 inputs with 4 classes: 1,108 parameters plus the loss's 8 carried slots in one
// bucket, 4,464 bytes; Gloo's ring on 2 ranks sends each rank exactly the buffer.
TEST(StepAccounting, DataParallelStepsSendTheirBucketThroughTheRing) {
  std::vector<std::vector<StepEvent>> events(2);
  std::vector<TrainResult> results(2);
  std::vector<std::shared_ptr<RecordingSink>> sinks{std::make_shared<RecordingSink>(),
                                                    std::make_shared<RecordingSink>()};
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    Trainer trainer(small_config("data_parallel"), comm);
    auto steps = std::make_shared<Steps>();
    trainer.add_callback(steps);
    trainer.add_callback(std::make_shared<MetricsLog>(sinks[comm->rank()], nullptr, /*every_steps=*/2));
    results[comm->rank()] = trainer.fit();
    events[comm->rank()] = steps->events;
  });
  const std::uint64_t bucket = 4 * (8 * 8 * 16 + 16 + 16 * 4 + 4 + 8);
  for (int r = 0; r < 2; ++r) {
    expect_events_add_up(events[r], results[r]);
    for (const auto& e : events[r]) EXPECT_EQ(e.bytes_sent, bucket) << "rank " << r << " step " << e.step;
    EXPECT_GT(results[r].step_time.communication, 0.0);
    // The strategy's own traffic is the steps' plus its setup (the module check and the weights).
    EXPECT_EQ(results[r].comm.ops.at("allreduce").wire_bytes, results[r].bytes_sent);
  }
  bool logged = false;
  for (const auto& record : sinks[0]->records) {
    for (const auto& [tag, value] : record.scalars) {
      if (tag != "comm/bytes_per_step") continue;
      EXPECT_EQ(value, static_cast<double>(bucket));
      logged = true;
    }
  }
  EXPECT_TRUE(logged);
}

}  // namespace
}  // namespace dtrain::train
