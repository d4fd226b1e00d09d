// Every model builds for its typical input, produces the right output shape, trains (every
// parameter gets a gradient), initialises deterministically, and rejects impossible options.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/models/ModelFactory.h"

namespace dtrain::models {
namespace {

config::ModelConfig named(const std::string& name) {
  config::ModelConfig config;
  config.name = name;
  return config;
}

torch::Tensor images(const InputSpec& spec, std::int64_t batch) {
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), spec.sample_shape.begin(), spec.sample_shape.end());
  return torch::randn(shape);
}

// Runs one forward and backward pass and checks every parameter received a finite gradient.
void expect_gradients_for_every_parameter(Network& network, const torch::Tensor& input) {
  network.train();
  auto output = network.forward(input);
  output.pow(2).mean().backward();
  for (const auto& item : network.named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << network.kind() << ": no gradient for " << item.key();
    EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
  }
}

TEST(ModelFactoryTest, MlpMatchesClosedFormParameterCountAndShape) {
  auto spec = InputSpec::image(1, 28, 28, 10);
  auto mlp = create_model(named("mlp"), spec);  // default hidden {256, 128}
  EXPECT_EQ(parameter_count(*mlp), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(parameter_count(*mlp), 235146);
  auto out = mlp->forward(images(spec, 3));
  EXPECT_EQ(out.sizes(), torch::IntArrayRef({3, 10}));
  expect_gradients_for_every_parameter(*mlp, images(spec, 3));
}

TEST(ModelFactoryTest, MlpActivationsAndUnknownActivation) {
  auto spec = InputSpec::image(1, 8, 8, 4);
  for (const auto& [activation, name] : dtrain::config::kActivationNames.entries) {
    auto config = named("mlp");
    config.hidden = {16};
    config.activation = activation;
    EXPECT_EQ(create_model(config, spec)->forward(images(spec, 2)).sizes(), torch::IntArrayRef({2, 4}))
        << name;
  }
  // An unknown name is refused where the configuration is read, before any model is built.
  EXPECT_THROW(dtrain::config::kActivationNames.parse("swish", "model.activation"), std::invalid_argument);
}

TEST(ModelFactoryTest, LeNet5MatchesClosedFormParameterCount) {
  const std::int64_t features = 16 * 5 * 5;
  const std::int64_t expected =
      (1 * 6 * 25 + 6) + (6 * 16 * 25 + 16) + (features * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10);
  auto fashion = InputSpec::image(1, 28, 28, 10);
  auto lenet = create_model(named("lenet5"), fashion);
  EXPECT_EQ(parameter_count(*lenet), expected);
  EXPECT_EQ(parameter_count(*lenet), 61706);
  EXPECT_EQ(lenet->forward(images(fashion, 2)).sizes(), torch::IntArrayRef({2, 10}));
  expect_gradients_for_every_parameter(*lenet, images(fashion, 2));

  // The classic 32x32 input needs no padding and gives the same 16x5x5 feature map.
  auto cifar = InputSpec::image(3, 32, 32, 10);
  auto lenet_cifar = create_model(named("lenet5"), cifar);
  EXPECT_EQ(parameter_count(*lenet_cifar), expected + 2 * 6 * 25);
  EXPECT_EQ(lenet_cifar->forward(images(cifar, 2)).sizes(), torch::IntArrayRef({2, 10}));

  auto folder = InputSpec::image(3, 64, 64, 2);
  EXPECT_EQ(create_model(named("lenet5"), folder)->forward(images(folder, 2)).sizes(),
            torch::IntArrayRef({2, 2}));
  EXPECT_THROW(create_model(named("lenet5"), InputSpec::image(1, 8, 8, 10)), std::invalid_argument);

  // On the CPU it convolves in channels-last order: the same outputs and gradients up to rounding.
  EXPECT_TRUE(lenet->channels_last_on_cpu());
  const auto x = images(fashion, 8);
  auto run = [&](bool channels_last) {
    lenet->set_channels_last_on_cpu(channels_last);
    lenet->zero_grad();
    auto out = lenet->forward(x);
    out.sum().backward();
    return std::make_pair(out.detach(), lenet->parameters()[0].grad().clone());
  };
  const auto [out_cl, grad_cl] = run(true);
  const auto [out_plain, grad_plain] = run(false);
  EXPECT_TRUE(torch::allclose(out_cl, out_plain, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(grad_cl, grad_plain, 1e-4, 1e-5));
  EXPECT_TRUE(lenet->parameters()[0].is_contiguous());  // parameters keep their layout
}

TEST(ModelFactoryTest, MnistNetIsTheDadPapersFeedForwardNet) {
  auto spec = InputSpec::image(1, 28, 28, 10);
  auto net = create_model(named("MNISTNet"), spec);
  const std::int64_t expected = (784 * 2048 + 2048) + (2048 * 1024 + 1024) + 2 * 1024 + (1024 * 512 + 512) +
                                2 * 512 + (512 * 256 + 256) + 2 * 256 + (256 * 10 + 10);
  EXPECT_EQ(parameter_count(*net), expected);
  auto out = net->forward(images(spec, 4));
  EXPECT_EQ(out.sizes(), torch::IntArrayRef({4, 10}));
  // Log-probabilities: each row's probabilities sum to one.
  EXPECT_TRUE(torch::allclose(out.exp().sum(1), torch::ones({4}), 1e-4, 1e-5));
  expect_gradients_for_every_parameter(*net, images(spec, 4));
}

TEST(ModelFactoryTest, ResNet18BothStems) {
  auto cifar = InputSpec::image(3, 32, 32, 10);
  auto resnet = create_model(named("resnet18"), cifar);
  // torchvision's resnet18 has 11,689,512 parameters with 1000 classes; with 10 the fc shrinks.
  EXPECT_EQ(parameter_count(*resnet), 11689512 - 512 * 990 - 990 - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64);
  EXPECT_EQ(resnet->forward(images(cifar, 2)).sizes(), torch::IntArrayRef({2, 10}));
  expect_gradients_for_every_parameter(*resnet, images(cifar, 2));

  auto config = named("resnet18");
  config.stem = dtrain::config::Stem::Imagenet;
  auto folder = InputSpec::image(3, 64, 64, 1000);
  auto imagenet = create_model(config, folder);
  EXPECT_EQ(parameter_count(*imagenet), 11689512);
  EXPECT_EQ(imagenet->forward(images(folder, 2)).sizes(), torch::IntArrayRef({2, 1000}));

  EXPECT_THROW(dtrain::config::kStemNames.parse("tiny", "model.stem"), std::invalid_argument);
}

TEST(ModelFactoryTest, ResNet50MatchesTorchvisionCount) {
  auto config = named("resnet50");
  config.stem = dtrain::config::Stem::Imagenet;
  auto spec = InputSpec::image(3, 32, 32, 1000);
  auto resnet = create_model(config, spec);
  EXPECT_EQ(parameter_count(*resnet), 25557032);  // torchvision.models.resnet50()
  torch::NoGradGuard no_grad;
  resnet->eval();
  EXPECT_EQ(resnet->forward(images(spec, 2)).sizes(), torch::IntArrayRef({2, 1000}));
}

TEST(ModelFactoryTest, ResNet50CifarStemTrains) {
  auto spec = InputSpec::image(3, 16, 16, 10);
  auto resnet = create_model(named("resnet50"), spec);
  expect_gradients_for_every_parameter(*resnet, images(spec, 2));
}

TEST(ModelFactoryTest, VisionTransformerShapesAndOptions) {
  auto config = named("vit");
  config.patch = 4;
  config.dim = 32;
  config.depth = 2;
  config.heads = 4;
  config.mlp_ratio = 2.0;
  auto spec = InputSpec::image(3, 32, 32, 2);
  auto vit = create_model(config, spec);
  EXPECT_EQ(vit->forward(images(spec, 2)).sizes(), torch::IntArrayRef({2, 2}));
  expect_gradients_for_every_parameter(*vit, images(spec, 2));
  // patch embedding + class token + positions, then per block 2 norms, qkv, projection, MLP; head.
  const std::int64_t dim = 32, hidden = 64, patches = 64;
  const std::int64_t block = 2 * 2 * dim + (dim * 3 * dim + 3 * dim) + (dim * dim + dim) +
                             (dim * hidden + hidden) + (hidden * dim + dim);
  const std::int64_t expected =
      (48 * dim + dim) + dim + (patches + 1) * dim + 2 * block + 2 * dim + (dim * 2 + 2);
  EXPECT_EQ(parameter_count(*vit), expected);

  config.patch = 5;
  EXPECT_THROW(create_model(config, spec), std::invalid_argument);
  config.patch = 4;
  config.heads = 3;
  EXPECT_THROW(create_model(config, spec), std::invalid_argument);
}

TEST(ModelFactoryTest, TransformerClassifierOnImagesAndTokens) {
  auto config = named("transformer");
  config.dim = 32;
  config.depth = 1;
  config.heads = 2;
  auto fashion = InputSpec::image(1, 28, 28, 10);
  auto on_images = create_model(config, fashion);
  EXPECT_EQ(on_images->forward(images(fashion, 2)).sizes(), torch::IntArrayRef({2, 10}));
  expect_gradients_for_every_parameter(*on_images, images(fashion, 2));
  EXPECT_THROW(on_images->forward(torch::randn({2, 1, 32, 32})), std::invalid_argument);

  auto text = InputSpec::tokens(/*vocab_size=*/20, /*seq_len=*/12, /*num_classes=*/3);
  auto on_tokens = create_model(config, text);
  auto tokens = torch::randint(0, 20, {2, 12}, torch::kLong);
  EXPECT_EQ(on_tokens->forward(tokens).sizes(), torch::IntArrayRef({2, 3}));
}

TEST(ModelFactoryTest, TransformerLanguageModelIsCausal) {
  auto config = named("transformer");
  config.task = dtrain::config::Task::Lm;
  config.dim = 32;
  config.depth = 2;
  config.heads = 4;
  auto text = InputSpec::tokens(/*vocab_size=*/17, /*seq_len=*/10);
  torch::manual_seed(3);
  auto lm = create_model(config, text);
  lm->eval();
  auto tokens = torch::randint(0, 17, {2, 10}, torch::kLong);
  auto logits = lm->forward(tokens);
  EXPECT_EQ(logits.sizes(), torch::IntArrayRef({2, 10, 17}));
  // Changing the last token must not change the predictions at earlier positions.
  auto changed = tokens.clone();
  changed.select(1, 9).fill_(0);
  changed.select(1, 9).add_(tokens.select(1, 9).add(1).remainder(17));
  auto logits_changed = lm->forward(changed);
  EXPECT_TRUE(torch::allclose(logits.narrow(1, 0, 9), logits_changed.narrow(1, 0, 9), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(logits.select(1, 9), logits_changed.select(1, 9)));
  // Shorter sequences are fine; longer ones than the model was built for are not.
  EXPECT_EQ(lm->forward(tokens.narrow(1, 0, 4)).sizes(), torch::IntArrayRef({2, 4, 17}));
  EXPECT_THROW(lm->forward(torch::zeros({1, 11}, torch::kLong)), std::invalid_argument);
  lm->train();
  expect_gradients_for_every_parameter(*lm, tokens);

  EXPECT_THROW(create_model(config, InputSpec::image(1, 28, 28, 10)), std::invalid_argument);
  EXPECT_THROW(dtrain::config::kTaskNames.parse("seq2seq", "model.task"), std::invalid_argument);
  // A classifier on a text set without classes says which task fits.
  config.task = dtrain::config::Task::Classifier;
  try {
    create_model(config, text);
    ADD_FAILURE() << "a classifier on unlabelled tokens was built";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("set model.task: lm"), std::string::npos) << e.what();
  }
}

TEST(ModelFactoryTest, InitialisationIsDeterministicGivenSeed) {
  auto spec = InputSpec::image(3, 32, 32, 10);
  for (const std::string name : {"mlp", "lenet5", "resnet18", "vit", "transformer"}) {
    torch::manual_seed(42);
    auto a = create_model(named(name), spec);
    torch::manual_seed(42);
    auto b = create_model(named(name), spec);
    torch::manual_seed(43);
    auto c = create_model(named(name), spec);
    auto pa = a->named_parameters();
    auto pb = b->named_parameters();
    auto pc = c->named_parameters();
    ASSERT_EQ(pa.size(), pb.size());
    bool any_differs = false;
    for (std::size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].key(), pb[i].key());
      EXPECT_TRUE(torch::equal(pa[i].value(), pb[i].value())) << name << " " << pa[i].key();
      any_differs = any_differs || !torch::equal(pa[i].value(), pc[i].value());
    }
    EXPECT_TRUE(any_differs) << name << ": another seed gave the same weights";
  }
}

TEST(ModelFactoryTest, StagesRunInForwardOrderAndShareParameters) {
  auto spec = InputSpec::image(1, 28, 28, 10);
  auto lenet = create_model(named("lenet5"), spec);
  lenet->eval();
  auto x = images(spec, 2);
  auto y = x;
  for (auto& stage : lenet->stages()) y = stage.forward(y);
  EXPECT_TRUE(torch::equal(y, lenet->forward(x)));
  std::int64_t stage_parameters = 0;
  for (auto& stage : lenet->stages()) stage_parameters += parameter_count(*stage.ptr());
  EXPECT_EQ(stage_parameters, parameter_count(*lenet));
  // Shared, not copied: a change through the network shows in its stages.
  {
    torch::NoGradGuard no_grad;
    lenet->parameters().front().add_(1.0);
  }
  EXPECT_TRUE(torch::equal(lenet->stages().front().ptr()->parameters().front(), lenet->parameters().front()));
}

TEST(ModelFactoryTest, UnknownNameListsKnownModels) {
  try {
    create_model(named("alexnet"), InputSpec::image(3, 32, 32, 10));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("alexnet"), std::string::npos);
    for (const auto& known : config::registered_choices(config::kModelKey).names())
      EXPECT_NE(message.find(known), std::string::npos) << known;
  }
}

TEST(ModelFactoryTest, ImageModelsRejectTokenInputs) {
  EXPECT_THROW(create_model(named("lenet5"), InputSpec::tokens(10, 8, 2)), std::invalid_argument);
  EXPECT_THROW(create_model(named("mlp"), InputSpec::image(1, 28, 28, 0)), std::invalid_argument);
}

TEST(ModelFactoryTest, SummaryNamesModelParametersAndInput) {
  auto spec = InputSpec::image(1, 28, 28, 10);
  auto lenet = create_model(named("lenet5"), spec);
  EXPECT_EQ(summary(*lenet, spec), "lenet5: 61,706 parameters in 12 stages, input 1x28x28 -> 10 classes");
}

}  // namespace
}  // namespace dtrain::models
