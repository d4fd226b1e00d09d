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

bool found(LossScaler& scaler, const std::vector<torch::Tensor>& grads) {
  scaler.clear_found_inf();
  scaler.check(grads, /*unscale=*/false);
  return scaler.found_inf().item<float>() > 0.0F;
}

TEST(LossScaler, FindsInfAndNaNInAnyGradient) {
  LossScaler scaler;
  auto a = torch::tensor({1.0F, -2.0F, 65504.0F});
  auto b = torch::ones({2, 2});
  EXPECT_FALSE(found(scaler, {a, b}));
  b[1][0] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(found(scaler, {a, b}));
  b[1][0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(found(scaler, {a, b}));
  EXPECT_FALSE(found(scaler, {a}));
  EXPECT_TRUE(torch::equal(a, torch::tensor({1.0F, -2.0F, 65504.0F})));  // checked, not unscaled
}

// GradScaler's state machine kept in doubles on the host, one decision at a time: what the
// tensor state must equal at every step.
struct HostScaler {
  LossScalerOptions options;
  double scale = options.init_scale;
  std::int64_t clean = 0, skipped = 0;
  bool update(bool overflow) {
    if (overflow) {
      scale *= options.backoff_factor;
      clean = 0;
      ++skipped;
      return false;
    }
    if (++clean >= options.growth_interval) {
      scale *= options.growth_factor;
      clean = 0;
    }
    return true;
  }
};

// 300 steps of the scaler on `device` (GradScaler's kernels where LibTorch has them there, tensor
// arithmetic otherwise) against the host state machine.
void follows_the_host_state_machine(const torch::Device& device) {
  SCOPED_TRACE(device.str());
  const LossScalerOptions options{1024.0, 2.0, 0.5, 3};
  LossScaler scaler(options);
  scaler.to(device);
  HostScaler host{options};
  torch::manual_seed(3);
  const auto overflows = torch::rand({300}) < 0.2;
  std::int64_t grown = 0, backed_off = 0;
  for (std::int64_t step = 0; step < overflows.size(0); ++step) {
    // The gradients the step's backward left: scaled, with an inf where the step overflowed.
    const auto unscaled = torch::randn({5, 3}).to(device);
    auto grad = unscaled * static_cast<float>(host.scale);
    const bool overflow = overflows[step].item<bool>();
    if (overflow) grad[step % 5][1] = std::numeric_limits<float>::infinity();
    const double before = host.scale;
    scaler.clear_found_inf();
    scaler.check({grad}, /*unscale=*/true);
    scaler.update();
    const bool stepped = host.update(overflow);
    ASSERT_EQ(scaler.scale(), host.scale) << "step " << step;
    ASSERT_EQ(scaler.clean_steps(), host.clean) << "step " << step;
    ASSERT_EQ(scaler.skipped_steps(), host.skipped) << "step " << step;
    ASSERT_EQ(scaler.found_inf().item<float>() > 0.0F, !stepped) << "step " << step;
    if (stepped) {
      ASSERT_TRUE(torch::equal(grad, unscaled)) << "step " << step;  // a power of two: exact
    }
    grown += host.scale > before ? 1 : 0;
    backed_off += host.scale < before ? 1 : 0;
  }
  EXPECT_GT(grown, 5);  // the sequence went through growth and backoff both, many times
  EXPECT_GT(backed_off, 20);
}

TEST(LossScaler, TensorStateEqualsTheHostStateMachineStepByStep) {
  follows_the_host_state_machine(torch::kCPU);
  if (torch::cuda::is_available()) follows_the_host_state_machine(torch::Device(torch::kCUDA, 0));
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
