// train.channels_last: a ResNet step with its 4-D weights and batches in channels-last order takes
// the weights where the default order takes them (the same convolutions in another memory layout:
// equal up to float rounding), alone and under data_parallel on 2 ranks, and the weights stay
// channels-last; a model without convolutions refuses it by name. The rounding of two layouts is
// amplified by batch normalisation over a small batch (a channel whose values barely vary divides its
// gradient by nearly sqrt(eps)): 4-5e-5 after one step at 8 samples, 5e-6 at 32, against updates of
// about 1e-3 to 1e-2 at lr 0.1. So one step at 32 samples, and the difference is judged against the update: a
// gradient laid out wrongly would be as large as the update itself.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/models/ModelFactory.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

config::RunConfig resnet(const std::string& strategy, const std::string& channels_last) {
  auto c = testing::small_trainer_config("channels-last");
  c.data.synthetic_shape = {3, 16, 16};
  c.data.synthetic_size = 128;
  c.data.batch_size = 32;
  c.model.name = "resnet18";
  c.optim.name = "sgd";
  c.optim.lr = 0.1;
  c.train.epochs = 1;
  c.train.max_steps = 1;
  c.parallel.strategy = strategy;
  c.train.channels_last = config::kAutoBoolNames.parse(channels_last, "train.channels_last");
  return c;
}

struct Trained {
  std::map<std::string, torch::Tensor> before, weights;
  bool channels_last = false;
  bool weights_in_channels_last = true;  // every 4-D parameter, after training
};

Trained train(const config::RunConfig& config, comm::CommunicatorPtr comm) {
  Trainer trainer(config, comm);
  Trained t;
  for (const auto& [name, w] : trainer.strategy().model_state()) t.before[name] = w.clone();
  trainer.fit();
  t.weights = trainer.strategy().model_state();
  t.channels_last = trainer.model_facts().channels_last;
  for (const auto& [name, w] : t.weights) {
    if (w.dim() == 4 && name.find("weight") != std::string::npos)
      t.weights_in_channels_last &= w.is_contiguous(at::MemoryFormat::ChannelsLast);
  }
  return t;
}

// Every trained weight within 10% of its tensor's largest update of `b`'s step from `a`'s.
void expect_close(const Trained& a, const Trained& b) {
  for (const auto& [name, w] : a.weights) {
    if (!torch::isFloatingType(w.scalar_type()) || name.find("running") != std::string::npos) continue;
    const auto other = b.weights.at(name);
    const double update = (other - b.before.at(name)).abs().max().item<double>();
    const double difference = (w - other).abs().max().item<double>();
    if (update == 0.0) continue;  // a buffer or a parameter the step left alone
    EXPECT_LE(difference, 0.1 * update) << name << ": " << difference << " against an update of " << update;
  }
  EXPECT_GT((b.weights.at("layers.0.weight") - b.before.at("layers.0.weight")).abs().max().item<double>(),
            1e-3)
      << "the step moved the first convolution too little to judge";
}

// The mathematics, without float32's rounding: a ResNet-18's gradients in float64 with weights and
// batch channels-last equal those of the default order to 1e-9 of their size.
TEST(ChannelsLast, GradientsEqualTheDefaultOrderInFloat64) {
  models::InputSpec input;
  input.sample_shape = {3, 16, 16};
  input.num_classes = 4;
  config::ModelConfig model_config;
  model_config.name = "resnet18";
  torch::manual_seed(3);
  const auto x = torch::randn({8, 3, 16, 16}, torch::kDouble);
  const auto y = torch::randint(0, 4, {8}, torch::kLong);
  std::vector<std::map<std::string, torch::Tensor>> grads;
  for (const std::string setting : {"false", "true"}) {
    torch::manual_seed(5);
    auto net = models::create_model(model_config, input);
    net->to(torch::kDouble);
    EXPECT_EQ(apply_channels_last(*net, config::kAutoBoolNames.parse(setting, "train.channels_last"),
                                  torch::Device(torch::kCPU)),
              setting == "true");
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    std::map<std::string, torch::Tensor> g;
    for (const auto& p : net->named_parameters()) {
      if (setting == "true" && p.value().dim() == 4) {
        EXPECT_TRUE(p.value().is_contiguous(at::MemoryFormat::ChannelsLast)) << p.key();
      }
      g[p.key()] = p.value().grad().clone();
    }
    grads.push_back(g);
  }
  for (const auto& [name, g] : grads[0]) {
    const double size = g.abs().max().item<double>();
    EXPECT_LE((g - grads[1].at(name)).abs().max().item<double>(), 1e-9 * std::max(size, 1e-12)) << name;
  }
}

TEST(ChannelsLast, DataParallelOnTwoRanksStepsAsTheDefaultOrderDoes) {
  std::vector<Trained> plain(2), nhwc(2);
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    plain[comm->rank()] = train(resnet("data_parallel", "false"), comm);
  });
  dtrain::testing::run_world(2, [&](std::shared_ptr<comm::Communicator> comm) {
    nhwc[comm->rank()] = train(resnet("data_parallel", "true"), comm);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(nhwc[r].channels_last);
    expect_close(nhwc[r], plain[r]);
  }
}

TEST(ChannelsLast, AModelWithoutConvolutionsRefusesItByName) {
  auto config = testing::small_trainer_config("channels-last");
  config.train.channels_last = config::AutoBool::True;
  try {
    Trainer trainer(config, nullptr);
    FAIL() << "an mlp accepted train.channels_last: true";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.channels_last: true applies to a model with convolutions"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::train
