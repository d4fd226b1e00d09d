// Losses equal hand-computed values for classifier and language-model shapes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/optim/Loss.h"

namespace dtrain::optim {
namespace {

// Two samples, three classes.
const std::vector<float> kLogits{1.0f, 2.0f, 0.0f, 0.5f, 0.5f, 3.0f};

double log_sum_exp(double a, double b, double c) {
  return std::log(std::exp(a) + std::exp(b) + std::exp(c));
}

TEST(LossTest, CrossEntropyByHand) {
  auto logits = torch::tensor(kLogits).view({2, 3});
  auto targets = torch::tensor({1, 2}, torch::kLong);
  const double expected = 0.5 * ((log_sum_exp(1, 2, 0) - 2.0) + (log_sum_exp(0.5, 0.5, 3) - 3.0));
  EXPECT_NEAR(create_loss("cross_entropy")(logits, targets).item<double>(), expected, 1e-6);
  EXPECT_NEAR(create_loss("CrossEntropyLoss")(logits, targets).item<double>(), expected, 1e-6);
}

TEST(LossTest, NllOnLogProbabilitiesIsMinusMeanTargetLogProbability) {
  auto log_probs = torch::log(torch::tensor({0.2f, 0.7f, 0.1f, 0.6f, 0.3f, 0.1f}).view({2, 3}));
  auto targets = torch::tensor({1, 0}, torch::kLong);
  const double expected = -0.5 * (std::log(0.7) + std::log(0.6));
  EXPECT_NEAR(create_loss("nll")(log_probs, targets).item<double>(), expected, 1e-6);
  EXPECT_NEAR(create_loss("NLL")(log_probs, targets).item<double>(), expected, 1e-6);
  // On raw logits it is the likelihood of their softmax: equal to cross-entropy.
  auto logits = torch::tensor(kLogits).view({2, 3});
  EXPECT_NEAR(create_loss("nll")(logits, targets).item<double>(),
              create_loss("cross_entropy")(logits, targets).item<double>(), 1e-6);
}

TEST(LossTest, MseWithOneHotAndFloatTargets) {
  auto outputs = torch::tensor(kLogits).view({2, 3});
  auto classes = torch::tensor({1, 2}, torch::kLong);
  // one-hot (0,1,0), (0,0,1): squared errors 1, 1, 0, 0.25, 0.25, 4 over six entries.
  EXPECT_NEAR(create_loss("mse")(outputs, classes).item<double>(), (1 + 1 + 0 + 0.25 + 0.25 + 4) / 6.0, 1e-6);
  auto targets = torch::zeros({2, 3});
  EXPECT_NEAR(create_loss("mse")(outputs, targets).item<double>(), (1 + 4 + 0 + 0.25 + 0.25 + 9) / 6.0, 1e-6);
  EXPECT_THROW(create_loss("mse")(outputs, torch::zeros({3, 2})), std::invalid_argument);
}

TEST(LossTest, LanguageModelOutputsAreFlattened) {
  auto logits = torch::randn({2, 4, 5});
  auto targets = torch::randint(0, 5, {2, 4}, torch::kLong);
  auto flat = torch::nn::functional::cross_entropy(logits.reshape({8, 5}), targets.reshape({8}));
  EXPECT_NEAR(create_loss("cross_entropy")(logits, targets).item<double>(), flat.item<double>(), 1e-6);
  EXPECT_NEAR(create_loss("nll")(logits, targets).item<double>(), flat.item<double>(), 1e-6);
}

TEST(LossTest, UnknownNameAndWrongTargetsThrow) {
  try {
    create_loss("hinge");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    for (const auto& known : config::registered_choices(config::kLossKey).names())
      EXPECT_NE(message.find(known), std::string::npos) << known;
  }
  auto logits = torch::randn({2, 3});
  EXPECT_THROW(create_loss("cross_entropy")(logits, torch::zeros({2})),
               std::invalid_argument);  // float targets
  EXPECT_THROW(create_loss("nll")(logits, torch::zeros({3}, torch::kLong)), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::optim
