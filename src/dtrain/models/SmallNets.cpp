// The small models: mlp (hidden sizes, activation), Catalyst dAD's MNISTNet and LeNet-5. All of them
// adapt to the input shape: the first layer's width is computed from (C, H, W).
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/pooling.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "dtrain/models/Architectures.h"
#include "dtrain/models/Linear.h"

namespace dtrain::models::detail {

void require_image_input(const std::string& model, const InputSpec& input) {
  const auto& shape = input.sample_shape;
  const bool ok = !input.is_tokens() && shape.size() == 3 && shape[0] > 0 && shape[1] > 0 && shape[2] > 0;
  if (!ok) {
    throw std::invalid_argument(fmt::format(
        "{}: expected image inputs shaped (C, H, W) with positive sizes, found {}{}; use an image data set "
        "or model.name: transformer for token sequences",
        model, input.is_tokens() ? "token inputs " : "", fmt::join(shape, "x")));
  }
}

void require_classes(const std::string& model, const InputSpec& input) {
  if (input.num_classes <= 0) {
    throw std::invalid_argument(fmt::format(
        "{}: expected a positive number of classes, found {}; the data set must say how many classes it has",
        model, input.num_classes));
  }
}

namespace {

torch::nn::AnyModule activation_module(config::Activation activation) {
  switch (activation) {
    case config::Activation::Relu:
      return torch::nn::AnyModule(torch::nn::ReLU());
    case config::Activation::Tanh:
      return torch::nn::AnyModule(torch::nn::Tanh());
    case config::Activation::Gelu:
      return torch::nn::AnyModule(torch::nn::GELU());
    case config::Activation::Sigmoid:
      return torch::nn::AnyModule(torch::nn::Sigmoid());
  }
  throw std::logic_error("model.activation: a value with no module");
}

std::int64_t flat_size(const InputSpec& input) {
  std::int64_t size = 1;
  for (auto d : input.sample_shape) size *= d;
  return size;
}

}  // namespace

NetworkPtr build_mlp(const config::ModelConfig& config, const InputSpec& input) {
  require_image_input("mlp", input);
  require_classes("mlp", input);
  torch::nn::Sequential layers;
  layers->push_back(torch::nn::Flatten());
  std::int64_t width = flat_size(input);
  for (int hidden : config.hidden) {
    if (hidden <= 0) {
      throw std::invalid_argument(fmt::format(
          "model.hidden: expected positive layer widths, found {}; e.g. model.hidden: [256, 128]", hidden));
    }
    layers->push_back(Linear(width, hidden));
    layers->push_back(activation_module(config.activation));
    width = hidden;
  }
  if (config.dropout > 0.0) layers->push_back(torch::nn::Dropout(config.dropout));
  layers->push_back(Linear(width, input.num_classes));
  return std::make_shared<Network>("mlp", layers);
}

// Catalyst dAD's MNISTNet (bbradt/catalyst-dad, models/MNISTNet.py): a feed-forward network of Linear
// layers, which is what dAD and rank-dAD synchronise. Its output is log_softmax, as in Catalyst dAD;
// those are also valid logits, since cross-entropy is unchanged by log_softmax.
NetworkPtr build_mnistnet(const config::ModelConfig& config, const InputSpec& input) {
  require_image_input("mnistnet", input);
  require_classes("mnistnet", input);
  torch::nn::Sequential layers;
  layers->push_back(torch::nn::Flatten());
  layers->push_back(Linear(flat_size(input), 2048));
  layers->push_back(torch::nn::ReLU());
  std::int64_t width = 2048;
  for (std::int64_t next : {1024, 512, 256}) {
    layers->push_back(Linear(width, next));
    layers->push_back(torch::nn::BatchNorm1d(next));
    layers->push_back(torch::nn::ReLU());
    width = next;
  }
  layers->push_back(Linear(width, input.num_classes));
  layers->push_back(torch::nn::LogSoftmax(torch::nn::LogSoftmaxOptions(1)));
  return std::make_shared<Network>("mnistnet", layers);
}

// DiNNO's CNN (javieryu/nn_distributed_training models/mnist_conv_nn.py): one ReLU
// convolution of model.num_filters filters of model.kernel_size (stride 1, no padding), 2x2 max
// pooling, a linear layer of model.linear_width with ReLU, and the classifier, ending in
// log_softmax as there (NLL loss); log-probabilities are also valid logits for cross-entropy.
NetworkPtr build_dinnocnn(const config::ModelConfig& config, const InputSpec& input) {
  require_image_input("dinnocnn", input);
  require_classes("dinnocnn", input);
  const std::int64_t k = config.kernel_size;
  const std::int64_t pooled_h = (input.sample_shape[1] - (k - 1)) / 2;
  const std::int64_t pooled_w = (input.sample_shape[2] - (k - 1)) / 2;
  if (pooled_h < 1 || pooled_w < 1) {
    throw std::invalid_argument(fmt::format(
        "model.kernel_size: {} leaves nothing of {}x{} images after the 2x2 pool; use a kernel of at "
        "most {}",
        k, input.sample_shape[1], input.sample_shape[2],
        std::min(input.sample_shape[1], input.sample_shape[2]) - 1));
  }
  torch::nn::Sequential layers;
  layers->push_back(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(input.sample_shape[0], config.num_filters, k)));
  layers->push_back(torch::nn::ReLU());
  layers->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  layers->push_back(torch::nn::Flatten());
  layers->push_back(Linear(config.num_filters * pooled_h * pooled_w, config.linear_width));
  layers->push_back(torch::nn::ReLU());
  layers->push_back(Linear(config.linear_width, input.num_classes));
  layers->push_back(torch::nn::LogSoftmax(torch::nn::LogSoftmaxOptions(1)));
  return std::make_shared<Network>("dinnocnn", layers);
}

// LeNet-5 (LeCun et al. 1998) with ReLU and max pooling. The original takes 32x32 images; 28x28
// ones are padded by 2 in the first convolution so the feature maps match (16 x 5 x 5).
NetworkPtr build_lenet5(const config::ModelConfig& config, const InputSpec& input) {
  require_image_input("lenet5", input);
  require_classes("lenet5", input);
  const std::int64_t channels = input.sample_shape[0];
  const std::int64_t height = input.sample_shape[1];
  const std::int64_t width = input.sample_shape[2];
  const std::int64_t padding = (height == 28 && width == 28) ? 2 : 0;
  // conv 5x5 (stride 1) then 2x2 max pool, twice.
  auto after_block = [](std::int64_t size, std::int64_t pad) { return (size + 2 * pad - 4) / 2; };
  const std::int64_t out_h = after_block(after_block(height, padding), 0);
  const std::int64_t out_w = after_block(after_block(width, padding), 0);
  if (out_h < 1 || out_w < 1) {
    throw std::invalid_argument(fmt::format(
        "lenet5: expected images of at least 16x16 (28x28 or 32x32 are typical), found {}x{}; use a larger "
        "data.image_size or another model",
        height, width));
  }
  torch::nn::Sequential layers;
  layers->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 6, 5).padding(padding)));
  layers->push_back(torch::nn::ReLU());
  layers->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  layers->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 16, 5)));
  layers->push_back(torch::nn::ReLU());
  layers->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  layers->push_back(torch::nn::Flatten());
  layers->push_back(Linear(16 * out_h * out_w, 120));
  layers->push_back(torch::nn::ReLU());
  layers->push_back(Linear(120, 84));
  layers->push_back(torch::nn::ReLU());
  if (config.dropout > 0.0) layers->push_back(torch::nn::Dropout(config.dropout));
  layers->push_back(Linear(84, input.num_classes));
  auto network = std::make_shared<Network>("lenet5", layers);
  network->set_channels_last_on_cpu(true);
  return network;
}

}  // namespace dtrain::models::detail
