// Epochs carry one number everywhere: a step's record and log line, the evaluation after it and
// the epoch's end all say the same epoch, counted from 1, in metrics.jsonl's records and the log.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/io/Logger.h"
#include "dtrain/train/RunCallbacks.h"
#include "dtrain/train/Trainer.h"
#include "support/Files.h"
#include "support/ScratchDir.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

struct RecordingSink : io::MetricsSink {
  void write(const io::MetricsRecord& record) override { records.push_back(record); }
  void flush() override {}
  std::vector<io::MetricsRecord> records;
};

bool has(const io::MetricsRecord& record, const std::string& tag) {
  for (const auto& [name, value] : record.scalars) {
    if (name == tag) return true;
  }
  return false;
}

TEST(EpochNumbers, RecordsAndLogLinesNumberEpochsAlikeFromOne) {
  auto config = testing::small_trainer_config("epochs");  // 2 epochs of 16 steps
  config.train.log_every_steps = 4;
  config.train.eval_every_steps = 5;
  dtrain::testing::ScratchDir dir;
  io::LoggerOptions options;
  options.file = dir.path() / "log.txt";
  options.timestamps = false;
  auto logger = std::make_shared<io::Logger>(options);
  auto sink = std::make_shared<RecordingSink>();
  Trainer trainer(config, nullptr);
  trainer.add_callback(std::make_shared<MetricsLog>(sink, logger, config.train.log_every_steps));
  trainer.fit();

  std::map<std::string, int> seen;
  for (const auto& record : sink->records) {
    // Steps 1..16 are epoch 1, 17..32 epoch 2, whatever the record.
    const auto epoch = (record.step + 15) / 16;
    EXPECT_EQ(record.epoch, epoch) << "step " << record.step;
    for (const char* tag : {"train/loss", "val/loss", "train_epoch/loss"})
      seen[tag] += has(record, tag) ? 1 : 0;
  }
  EXPECT_EQ(seen["train/loss"], 8);
  EXPECT_GE(seen["val/loss"], 6);  // steps 5, 10, 15, 16 (epoch end), 20, 25, 30, 32
  EXPECT_EQ(seen["train_epoch/loss"], 2);

  const auto log = dtrain::testing::read_file(dir.path() / "log.txt");
  for (const char* line :
       {"step 4/32 epoch 1 ", "step 16/32 epoch 1 ", "step 20/32 epoch 2 ", "epoch 1 done", "epoch 2 done"}) {
    EXPECT_NE(log.find(line), std::string::npos) << line << "\n" << log;
  }
  EXPECT_EQ(log.find("epoch 0"), std::string::npos) << log;
}

}  // namespace
}  // namespace dtrain::train
