// Class activation maps: the hand-computed 2x2 case, the split of a GAP network (logits from the
// features equal the network's), refusal of a network without global average pooling, and the
// rendered images' sizes and value ranges.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/models/Cam.h"
#include "dtrain/models/Linear.h"
#include "dtrain/models/ModelFactory.h"

namespace dtrain::models {
namespace {

TEST(Cam, HandComputedTwoByTwoMaps) {
  // Two 2x2 feature maps and three classes. Class 1: M = 2 f0 - f1 = [[2, 3], [6, 7]];
  // class 2: M = f1 = [[0, 1], [0, 1]].
  const auto features = torch::tensor({1.f, 2.f, 3.f, 4.f, 0.f, 1.f, 0.f, 1.f}).view({1, 2, 2, 2});
  const auto weight = torch::tensor({0.f, 0.f, 2.f, -1.f, 0.f, 1.f}).view({3, 2});
  const auto classes = torch::tensor({1, 2}, torch::kLong).view({1, 2});
  const auto maps = class_activation_maps(features, weight, classes);
  ASSERT_EQ(maps.sizes(), (std::vector<std::int64_t>{1, 2, 2, 2}));
  EXPECT_TRUE(torch::equal(maps[0][0], torch::tensor({2.f, 3.f, 6.f, 7.f}).view({2, 2})));
  EXPECT_TRUE(torch::equal(maps[0][1], torch::tensor({0.f, 1.f, 0.f, 1.f}).view({2, 2})));
  // At the same size, normalisation alone: (M - 2) / 5 and M / 1.
  const auto normalised = upsample_normalised(maps, 2, 2);
  EXPECT_TRUE(torch::allclose(normalised[0][0], torch::tensor({0.f, 0.2f, 0.8f, 1.f}).view({2, 2})));
  EXPECT_TRUE(torch::equal(normalised[0][1], maps[0][1]));
  // Class 0 has zero weights: a flat map, shown as zeros rather than NaN.
  const auto flat =
      upsample_normalised(class_activation_maps(features, weight, torch::zeros({1, 1}, torch::kLong)), 4, 4);
  EXPECT_TRUE(torch::equal(flat, torch::zeros({1, 1, 4, 4})));
}

TEST(Cam, UpsampledMapsKeepTheirRangeAndSize) {
  const auto maps = torch::randn({3, 2, 4, 4});
  const auto up = upsample_normalised(maps, 32, 24);
  ASSERT_EQ(up.sizes(), (std::vector<std::int64_t>{3, 2, 32, 24}));
  for (int n = 0; n < 3; ++n) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_FLOAT_EQ(up[n][j].min().item<float>(), 0.f);
      EXPECT_FLOAT_EQ(up[n][j].max().item<float>(), 1.f);
    }
  }
}

TEST(Cam, JetRunsFromDarkBlueToDarkRed) {
  const auto colours = jet(torch::tensor({0.f, 0.5f, 1.f}).view({1, 3}));
  ASSERT_EQ(colours.sizes(), (std::vector<std::int64_t>{3, 1, 3}));
  EXPECT_TRUE(torch::allclose(colours.select(2, 0).flatten(), torch::tensor({0.f, 0.f, 0.5f})));
  EXPECT_TRUE(torch::allclose(colours.select(2, 1).flatten(), torch::tensor({0.5f, 1.f, 0.5f})));
  EXPECT_TRUE(torch::allclose(colours.select(2, 2).flatten(), torch::tensor({0.5f, 0.f, 0.f})));
}

TEST(Cam, ASmallGapNetworkSplitsIntoFeaturesAndClassifier) {
  torch::manual_seed(0);
  torch::nn::Sequential layers;
  layers->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3).padding(1)));
  layers->push_back(torch::nn::ReLU());
  layers->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  layers->push_back(torch::nn::Flatten());
  layers->push_back(Linear(2, 3));
  Network network("tiny-gap", layers);
  const auto split = find_gap_classifier(network);
  EXPECT_EQ(split.pool, 2u);
  EXPECT_EQ(split.linear, 4u);
  const auto images = torch::randn({2, 1, 5, 5});
  const auto out = cam_forward(network, images);
  ASSERT_EQ(out.features.sizes(), (std::vector<std::int64_t>{2, 2, 5, 5}));
  EXPECT_TRUE(torch::allclose(out.logits, network.forward(images)));
  // The paper's identity: a class's logit is its map's mean plus the bias.
  const auto classes = torch::tensor({0, 1, 2, 0, 1, 2}, torch::kLong).view({2, 3});
  const auto maps = class_activation_maps(out.features, out.weight, classes);
  const auto bias = network.layers()[4]->as<torch::nn::Linear>()->bias;
  EXPECT_TRUE(torch::allclose(maps.mean({2, 3}) + bias, out.logits, 1e-5, 1e-6));
}

TEST(Cam, ResNetIsAcceptedAndLeNetRefused) {
  config::ModelConfig resnet;
  resnet.name = "resnet18";
  const auto input = InputSpec::image(3, 16, 16, 4);
  auto network = create_model(resnet, input);
  const auto out = cam_forward(*network, torch::randn({1, 3, 16, 16}));
  EXPECT_EQ(out.features.sizes(), (std::vector<std::int64_t>{1, 512, 2, 2}));
  EXPECT_EQ(out.weight.sizes(), (std::vector<std::int64_t>{4, 512}));

  config::ModelConfig lenet;
  lenet.name = "lenet5";
  auto small = create_model(lenet, InputSpec::image(1, 28, 28, 10));
  try {
    find_gap_classifier(*small);
    FAIL() << "lenet5 has no global average pooling";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(
        e.what(),
        "model.name: lenet5 has no global average pooling before its classifier; CAM needs resnet18 or "
        "resnet50");
  }
}

TEST(Cam, RenderedPanelsAndLayoutsHaveTheirSizesAndRanges) {
  const auto grey = torch::rand({1, 6, 8});
  const auto map = torch::rand({6, 8});
  const auto panels = render_cam(grey, map, 0.5);
  for (const auto& p : {panels.input, panels.heat, panels.blend}) {
    EXPECT_EQ(p.sizes(), (std::vector<std::int64_t>{3, 6, 8}));
    EXPECT_EQ(p.scalar_type(), torch::kUInt8);
  }
  // The blend is halfway between the input and the heat map, to rounding.
  const auto mid = (panels.input.to(torch::kFloat) + panels.heat.to(torch::kFloat)) / 2;
  EXPECT_LE((panels.blend.to(torch::kFloat) - mid).abs().max().item<float>(), 1.0f);
  // alpha 0 is the input itself.
  EXPECT_TRUE(torch::equal(render_cam(grey, map, 0.0).blend, panels.input));

  const auto row = image_row({panels.input, panels.heat, panels.blend}, 2);
  EXPECT_EQ(row.sizes(), (std::vector<std::int64_t>{3, 6, 3 * 8 + 2 * 2}));
  EXPECT_TRUE(torch::equal(row.narrow(2, 8, 2), torch::full({3, 6, 2}, 255, torch::kUInt8)));
  const auto column = image_column({row, panels.input}, 3);
  EXPECT_EQ(column.sizes(), (std::vector<std::int64_t>{3, 6 + 3 + 6, 28}));
  const auto big = enlarge(panels.input, 4);
  EXPECT_EQ(big.sizes(), (std::vector<std::int64_t>{3, 24, 32}));
  EXPECT_EQ(big[1][23][31].item<int>(), panels.input[1][5][7].item<int>());
}

}  // namespace
}  // namespace dtrain::models
