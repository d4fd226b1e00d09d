// Transfer learning (model.init_from, init_strict, freeze): weights come back by name from a
// checkpoint, a model.pt or a run folder; strict refuses any mismatch, partial keeps a classifier
// head of another class count as initialised; frozen parameters stay bit-identical through
// training on one process and on two data-parallel and dAD ranks; decentralized training refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/train/Trainer.h"
#include "dtrain/train/Transfer.h"
#include "support/ScratchDir.h"
#include "support/ThreadWorld.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

config::RunConfig small_config() {
  config::RunConfig c;
  c.name = "transfer-test";
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = {1, 8, 8};
  c.data.synthetic_classes = 4;
  c.data.synthetic_size = 128;
  c.data.batch_size = 16;
  c.data.eval_batch_size = 64;
  c.data.test_subset_size = 32;
  c.model.name = "mlp";
  c.model.hidden = {16};
  c.optim.name = "sgd";
  c.optim.lr = 0.1;
  c.optim.momentum = 0.9;
  c.optim.weight_decay = 0.01;  // would move a frozen parameter the optimizer held, gradient or not
  c.parallel.strategy = "local";
  c.train.epochs = 1;
  c.train.seed = 7;
  c.train.log_every_steps = 0;
  return c;
}

std::map<std::string, torch::Tensor> state_of(Trainer& t) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, value] : t.strategy().model_state()) out[name] = value.clone();
  return out;
}

class Transfer : public ::testing::Test {
 protected:
  // A source run trained for a few steps, its weights as a checkpoint and as model.pt.
  std::map<std::string, torch::Tensor> train_source(const config::RunConfig& config) {
    auto c = config;
    c.train.max_steps = 3;
    Trainer source(c, nullptr);
    source.fit();
    io::Checkpoint checkpoint;
    source.save_state(checkpoint);
    checkpoint.save(dir_ / "source.ckpt");
    fs::create_directories(dir_ / "run");
    io::export_state_dict(dir_ / "run" / "model.pt", source.strategy().model_state());
    return state_of(source);
  }

  dtrain::testing::ScratchDir dir_;
};

TEST(TransferGlob, MatchesStarsAndQuestionMarks) {
  EXPECT_TRUE(glob_match("layers.0.*", "layers.0.weight"));
  EXPECT_FALSE(glob_match("layers.0.*", "layers.10.weight"));
  EXPECT_TRUE(glob_match("layers.?.weight", "layers.3.weight"));
  EXPECT_FALSE(glob_match("layers.?.weight", "layers.13.weight"));
  EXPECT_TRUE(glob_match("*.bn1.*", "layers.4.bn1.running_mean"));
  EXPECT_TRUE(glob_match("*", "anything"));
  EXPECT_FALSE(glob_match("layers.1.weight", "layers.1.weight2"));
  EXPECT_TRUE(glob_match("layers.1*", "layers.1"));
}

TEST_F(Transfer, StrictLoadFromCheckpointModelPtAndRunFolderGivesTheSourceWeights) {
  const auto source = train_source(small_config());
  for (const auto& from : {dir_ / "source.ckpt", dir_ / "run" / "model.pt", dir_ / "run"}) {
    auto c = small_config();
    c.train.seed = 99;  // other fresh weights: everything must come from the file
    c.model.init_from = from.string();
    Trainer t(c, nullptr);
    const auto loaded = state_of(t);
    ASSERT_EQ(loaded.size(), source.size());
    for (const auto& [name, value] : source) {
      EXPECT_TRUE(torch::equal(loaded.at(name), value)) << from << ": " << name;
    }
    ASSERT_FALSE(t.model_facts().transfer.empty());
    EXPECT_NE(t.model_facts().transfer[0].find("4 of the model's tensors loaded"), std::string::npos)
        << t.model_facts().transfer[0];
  }
}

TEST_F(Transfer, StrictRefusesAnotherClassCountAndPartialKeepsTheFreshHead) {
  const auto source = train_source(small_config());
  auto c = small_config();
  c.data.synthetic_classes = 3;  // a new task: the head has 3 outputs, not 4
  c.model.init_from = (dir_ / "run" / "model.pt").string();
  try {
    Trainer t(c, nullptr);
    FAIL() << "a strict load of another head shape must fail";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("layers.3.weight (file [4, 16], model [3, 16])"), std::string::npos) << message;
    EXPECT_NE(message.find("model.init_strict: false"), std::string::npos) << message;
  }

  c.model.init_strict = false;
  Trainer partial(c, nullptr);
  auto fresh_config = c;
  fresh_config.model.init_from.clear();
  Trainer fresh(fresh_config, nullptr);
  const auto loaded = state_of(partial);
  const auto initial = state_of(fresh);
  EXPECT_TRUE(torch::equal(loaded.at("layers.1.weight"), source.at("layers.1.weight")));
  EXPECT_TRUE(torch::equal(loaded.at("layers.1.bias"), source.at("layers.1.bias")));
  EXPECT_TRUE(torch::equal(loaded.at("layers.3.weight"), initial.at("layers.3.weight")));
  EXPECT_TRUE(torch::equal(loaded.at("layers.3.bias"), initial.at("layers.3.bias")));
  std::string log;
  for (const auto& line : partial.model_facts().transfer) log += line + "\n";
  EXPECT_NE(log.find("2 of the model's tensors loaded"), std::string::npos) << log;
  EXPECT_NE(log.find("classifier head layers.3 replaced (4 -> 3 outputs)"), std::string::npos) << log;
  EXPECT_NE(log.find("kept layers.3.bias (file [4], model [3])"), std::string::npos) << log;
}

TEST_F(Transfer, WeightsOfAnotherModelOrNoFileAreOneLineErrors) {
  train_source(small_config());
  auto c = small_config();
  c.model.hidden = {8};  // no tensor keeps its shape
  c.data.synthetic_classes = 3;
  c.model.init_strict = false;
  c.model.init_from = (dir_ / "source.ckpt").string();
  EXPECT_THROW(
      {
        try {
          Trainer t(c, nullptr);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("none of the 4 tensors"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
  c.model.init_from = (dir_ / "missing.pt").string();
  EXPECT_THROW(Trainer(c, nullptr), std::invalid_argument);
  std::ofstream(dir_ / "junk.pt") << "not a tensor file";
  c.model.init_from = (dir_ / "junk.pt").string();
  try {
    Trainer t(c, nullptr);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("neither a dtrain checkpoint nor a torch.save dict"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Transfer, FreezePatternsAreChecked) {
  auto c = small_config();
  c.model.freeze = {"layers.9.*"};
  try {
    Trainer t(c, nullptr);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("model.freeze: pattern \"layers.9.*\" matches no parameter"),
              std::string::npos)
        << e.what();
  }
  c.model.freeze = {"*"};
  EXPECT_THROW(Trainer(c, nullptr), std::invalid_argument);
}

// Frozen parameters keep their loaded values exactly; the others train.
void expect_frozen(const std::map<std::string, torch::Tensor>& before,
                   const std::map<std::string, torch::Tensor>& after, const std::string& where) {
  EXPECT_TRUE(torch::equal(after.at("layers.1.weight"), before.at("layers.1.weight"))) << where;
  EXPECT_TRUE(torch::equal(after.at("layers.1.bias"), before.at("layers.1.bias"))) << where;
  EXPECT_FALSE(torch::equal(after.at("layers.3.weight"), before.at("layers.3.weight"))) << where;
}

TEST_F(Transfer, FrozenParametersStayBitIdenticalInOneProcess) {
  const auto source = train_source(small_config());
  for (const std::string optimizer : {"sgd", "adamw", "lbfgs"}) {
    auto c = small_config();
    c.optim.name = optimizer;
    if (optimizer != "sgd") c.optim.momentum = 0.0;
    if (optimizer == "lbfgs") {
      c.optim.lr = 0.5;
      c.optim.weight_decay = 0.0;  // lbfgs has none
    }
    c.model.init_from = (dir_ / "source.ckpt").string();
    c.model.freeze = {"layers.1.*"};
    Trainer t(c, nullptr);
    t.fit();
    expect_frozen(source, state_of(t), optimizer);
  }
}

TEST_F(Transfer, FrozenParametersStayBitIdenticalOnTwoRanks) {
  const auto source = train_source(small_config());
  for (const std::string strategy : {"data_parallel", "dad"}) {
    auto c = small_config();
    c.parallel.strategy = strategy;
    c.model.init_from = (dir_ / "run").string();
    c.model.freeze = {"layers.1.*"};
    std::vector<std::map<std::string, torch::Tensor>> after(2);
    dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
      Trainer t(c, comm);
      t.fit();
      after[comm->rank()] = state_of(t);
    });
    for (int r = 0; r < 2; ++r) expect_frozen(source, after[r], strategy + " rank " + std::to_string(r));
    EXPECT_TRUE(torch::equal(after[0].at("layers.3.weight"), after[1].at("layers.3.weight"))) << strategy;
  }
}

TEST_F(Transfer, DecentralizedTrainingRefusesFrozenParameters) {
  auto c = small_config();
  c.parallel.strategy = "decentralized";
  c.model.freeze = {"layers.1.*"};
  dtrain::testing::run_world(
      2,
      [&](std::shared_ptr<comm::Communicator> comm) {
        try {
          Trainer t(c, comm);
          ADD_FAILURE() << "decentralized training must refuse model.freeze";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("model.freeze: parameter layers.1.weight is frozen"),
                    std::string::npos)
              << e.what();
        }
      },
      dtrain::testing::WorldOptions::on("in-process"));
}

TEST_F(Transfer, ResumeLoadsTheCheckpointOverInitFrom) {
  const auto source = train_source(small_config());
  auto c = small_config();
  c.train.seed = 5;
  c.train.max_steps = 2;
  Trainer other(c, nullptr);
  other.fit();
  io::Checkpoint checkpoint;
  other.save_state(checkpoint);
  const auto saved = state_of(other);

  c.model.init_from = (dir_ / "source.ckpt").string();
  Trainer resumed(c, nullptr);
  resumed.load_state(checkpoint);
  const auto state = state_of(resumed);
  for (const auto& [name, value] : saved) EXPECT_TRUE(torch::equal(state.at(name), value)) << name;
  EXPECT_EQ(resumed.step(), 2);
}

}  // namespace
}  // namespace dtrain::train
