// The transformer classifier on padded sentences (InputSpec::pad_id): padding is neither attended
// to nor pooled, so a sentence's logits do not depend on how many pads follow it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/models/ModelFactory.h"

namespace dtrain::models {
namespace {

TEST(TransformerPadding, AppendedPadsLeaveASentencesLogitsUnchanged) {
  config::ModelConfig config;
  config.name = "transformer";
  config.dim = 16;
  config.depth = 2;
  config.heads = 2;
  auto input = InputSpec::tokens(/*vocab_size=*/20, /*seq_len=*/12, /*num_classes=*/3);
  input.pad_id = 0;
  torch::manual_seed(5);
  auto model = create_model(config, input);
  model->to(torch::kDouble);
  model->eval();
  const auto sentence = torch::tensor({{3, 7, 1, 9, 4}}, torch::kLong);
  const auto alone = model->forward(sentence);
  for (const int pads : {1, 3, 7}) {
    const auto padded = torch::cat({sentence, torch::zeros({1, pads}, torch::kLong)}, 1);
    const auto logits = model->forward(padded);
    EXPECT_LE((logits - alone).abs().max().item<double>(), 1e-6 * alone.abs().max().item<double>())
        << pads << " pads";
  }
  // Two sentences of different lengths in one batch: each as it is alone.
  const auto other = torch::tensor({{5, 2, 8}}, torch::kLong);
  const auto batch = torch::cat({sentence, torch::cat({other, torch::zeros({1, 2}, torch::kLong)}, 1)}, 0);
  const auto both = model->forward(batch);
  EXPECT_LE((both[0] - alone[0]).abs().max().item<double>(), 1e-9);
  EXPECT_LE((both[1] - model->forward(other)[0]).abs().max().item<double>(), 1e-9);

  // Without a pad id the same tokens are ordinary ones: appending them changes the logits, which is
  // what the mask is for.
  input.pad_id = -1;
  torch::manual_seed(5);
  auto unmasked = create_model(config, input);
  unmasked->to(torch::kDouble);
  unmasked->eval();
  const auto padded = torch::cat({sentence, torch::zeros({1, 3}, torch::kLong)}, 1);
  EXPECT_GT((unmasked->forward(padded) - unmasked->forward(sentence)).abs().max().item<double>(), 1e-6);
}

}  // namespace
}  // namespace dtrain::models
