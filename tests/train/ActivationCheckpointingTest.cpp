// train.activation_checkpointing through the Trainer: a run whose blocks are recomputed ends with
// the weights of the run that keeps its activations, bit for bit, and says what it recomputed; a
// model without blocks is refused by name before anything trains.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "dtrain/train/Trainer.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

using config::ActivationCheckpointing;

config::RunConfig transformer_config(ActivationCheckpointing mode, int every = 0) {
  auto c = testing::small_trainer_config("recompute-test");
  c.model.name = "transformer";
  c.model.dim = 8;
  c.model.heads = 2;
  c.model.depth = 3;
  c.model.dropout = 0.1;
  c.train.epochs = 1;
  c.train.activation_checkpointing = mode;
  c.train.activation_checkpointing_every = every;
  return c;
}

TEST(ActivationCheckpointingTrainer, SameWeightsAsKeepingTheActivations) {
  Trainer kept(transformer_config(ActivationCheckpointing::None), nullptr);
  kept.fit();
  EXPECT_EQ(kept.model_facts().recomputation, "");
  Trainer full(transformer_config(ActivationCheckpointing::Full), nullptr);
  full.fit();
  EXPECT_EQ(full.model_facts().recomputation,
            "activation checkpointing: full, 3 of 3 blocks recomputed (stages 1, 2, 3)");
  Trainer selective(transformer_config(ActivationCheckpointing::Selective, 2), nullptr);
  selective.fit();
  EXPECT_EQ(selective.model_facts().recomputation,
            "activation checkpointing: selective, 1 of 3 blocks recomputed (stages 2)");
  const auto expected = kept.strategy().model_state();
  for (auto* run : {&full, &selective}) {
    const auto state = run->strategy().model_state();
    for (const auto& [name, value] : expected) EXPECT_TRUE(torch::equal(state.at(name), value)) << name;
  }
}

// bf16 autocasts the recomputed forward as the first; fp16 rounds between stages on the CPU.
TEST(ActivationCheckpointingTrainer, SameWeightsInBf16AndFp16) {
  for (const auto precision : {config::Precision::Bf16, config::Precision::Fp16}) {
    auto kept_config = transformer_config(ActivationCheckpointing::None);
    auto full_config = transformer_config(ActivationCheckpointing::Full);
    kept_config.train.precision = full_config.train.precision = precision;
    kept_config.train.max_steps = full_config.train.max_steps = 4;
    Trainer kept(kept_config, nullptr);
    kept.fit();
    Trainer full(full_config, nullptr);
    full.fit();
    const auto state = full.strategy().model_state();
    for (const auto& [name, value] : kept.strategy().model_state())
      EXPECT_TRUE(torch::equal(state.at(name), value))
          << config::kPrecisionNames.name(precision) << " " << name;
  }
}

TEST(ActivationCheckpointingTrainer, AModelWithoutBlocksIsRefusedByName) {
  auto c = testing::small_trainer_config("recompute-test");  // an mlp: every stage one operation
  c.train.activation_checkpointing = ActivationCheckpointing::Full;
  try {
    Trainer trainer(c, nullptr);
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.activation_checkpointing: full: model mlp has no blocks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::train
