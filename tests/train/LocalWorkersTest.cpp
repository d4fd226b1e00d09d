// Note [local on several workers]: `local` on 2 ranks trains two models; the figures a run reports
// are rank 0's model's, the one its checkpoints and model.pt hold, on the whole evaluation set (not
// the mean of two models no file holds), and the strategy says so.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

TEST(LocalWorkers, TheReportedFiguresAreRankZerosModel) {
  auto config = testing::small_trainer_config("local-workers");
  config.train.epochs = 1;
  std::vector<TrainResult> results(2);
  std::vector<std::map<std::string, std::string>> notes(2);
  io::Checkpoint rank0;
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    Trainer trainer(config, comm);
    results[comm->rank()] = trainer.fit();
    notes[comm->rank()] = trainer.strategy().notes();
    io::Checkpoint checkpoint;
    trainer.save_state(checkpoint);
    if (comm->rank() == 0) rank0 = checkpoint;
  });
  // The two models differ (each trained on its own half), so their mean would not be rank 0's figure.
  Trainer alone(config, nullptr);
  alone.load_state(rank0);
  const auto expected = alone.evaluate();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].final_eval.samples, expected.samples) << "rank " << r;
    EXPECT_DOUBLE_EQ(results[r].final_eval.top1, expected.top1) << "rank " << r;
    EXPECT_DOUBLE_EQ(results[r].final_eval.loss, expected.loss) << "rank " << r;
    ASSERT_TRUE(notes[r].count("local")) << "rank " << r;
    EXPECT_NE(notes[r].at("local").find("rank 0's model"), std::string::npos);
  }
}

}  // namespace
}  // namespace dtrain::train
