// The dynamic loss scaler's state machine (GradScaler's defaults), its overflow check and its
// checkpoint state, and the names of train.precision.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "dtrain/optim/LossScaler.h"

namespace dtrain::optim {
namespace {

TEST(LossScaler, StartsAtTwoToTheSixteenAndDoublesAfter2000CleanSteps) {
  LossScaler scaler;
  EXPECT_EQ(scaler.scale(), 65536.0);
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.clean_steps(), 1999);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 131072.0);
  EXPECT_EQ(scaler.clean_steps(), 0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(LossScaler, OverflowSkipsHalvesAndRestartsTheCleanCount) {
  LossScaler scaler(LossScalerOptions{1024.0, 2.0, 0.5, 3});
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_FALSE(scaler.update(true));  // two clean steps are forgotten
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 256.0);
  EXPECT_TRUE(scaler.update(false));  // the third clean step in a row
  EXPECT_EQ(scaler.scale(), 512.0);
}

TEST(LossScaler, RefusesOptionsThatCannotWork) {
  EXPECT_THROW(LossScaler(LossScalerOptions{0.0, 2.0, 0.5, 10}), std::invalid_argument);
  EXPECT_THROW(LossScaler(LossScalerOptions{1.0, 1.0, 0.5, 10}), std::invalid_argument);
  EXPECT_THROW(LossScaler(LossScalerOptions{1.0, 2.0, 1.0, 10}), std::invalid_argument);
  EXPECT_THROW(LossScaler(LossScalerOptions{1.0, 2.0, 0.5, 0}), std::invalid_argument);
}

TEST(LossScaler, FindsInfAndNaNInAnyGradient) {
  auto a = torch::zeros({3}, torch::requires_grad());
  auto b = torch::zeros({2, 2}, torch::requires_grad());
  auto no_grad = torch::zeros({2}, torch::requires_grad());
  a.mutable_grad() = torch::tensor({1.0F, -2.0F, 65504.0F});
  b.mutable_grad() = torch::ones({2, 2});
  EXPECT_FALSE(LossScaler::found_non_finite({a, b, no_grad}));
  b.mutable_grad()[1][0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(LossScaler::found_non_finite({a, b}));
  b.mutable_grad()[1][0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(LossScaler::found_non_finite({a, b}));
  EXPECT_FALSE(LossScaler::found_non_finite({a}));
}

TEST(LossScaler, StateRoundTripsAndMalformedStateIsRefused) {
  LossScaler saved;
  saved.update(true);
  saved.update(false);
  saved.update(false);
  LossScaler restored;
  restored.load_state(saved.state());
  EXPECT_EQ(restored.scale(), 32768.0);
  EXPECT_EQ(restored.clean_steps(), 2);
  EXPECT_EQ(restored.skipped_steps(), 1);

  auto missing = saved.state();
  missing.erase("clean_steps");
  try {
    restored.load_state(missing);
    FAIL() << "a state without clean_steps was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("clean_steps"), std::string::npos) << e.what();
  }
  auto negative = saved.state();
  negative["scale"] = torch::tensor({-1.0}, torch::kDouble);
  EXPECT_THROW(restored.load_state(negative), std::invalid_argument);
  EXPECT_EQ(restored.scale(), 32768.0);  // a refused state changes nothing
}

TEST(Precision, NamesRoundTripAndUnknownOnesAreListed) {
  for (const auto p : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    EXPECT_EQ(parse_precision(to_string(p)), p);
  }
  try {
    parse_precision("fp8");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp32, bf16, fp16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::optim
