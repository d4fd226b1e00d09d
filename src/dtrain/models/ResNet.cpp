// ResNet-18 and ResNet-50 (He et al. 2016, torchvision's layout: stride on the 3x3 convolution of
// a bottleneck). The "cifar" stem is a 3x3 convolution without pooling, for 32x32 images; the
// "imagenet" stem is the 7x7 stride-2 convolution and 3x3 max pool. Global average pooling makes
// both work for any image size.
#include <torch/nn/init.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/pooling.h>

#include <fmt/format.h>

#include <stdexcept>

#include "dtrain/models/Architectures.h"
#include "dtrain/models/Linear.h"

namespace dtrain::models::detail {

namespace {

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Two 3x3 convolutions; expansion 1.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(std::int64_t in, std::int64_t planes, std::int64_t stride) {
    conv1_ = register_module("conv1", conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(planes));
    if (stride != 1 || in != planes) {
      shortcut_ = register_module(
          "shortcut", torch::nn::Sequential(conv(in, planes, 1, stride), torch::nn::BatchNorm2d(planes)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
    out = bn2_->forward(conv2_->forward(out));
    return torch::relu(out + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(BasicBlock);

// 1x1 reduce, 3x3, 1x1 expand (x4).
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 4;

  BottleneckImpl(std::int64_t in, std::int64_t planes, std::int64_t stride) {
    conv1_ = register_module("conv1", conv(in, planes, 1, 1));
    bn1_ = register_module("bn1", torch::nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
    bn2_ = register_module("bn2", torch::nn::BatchNorm2d(planes));
    conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
    bn3_ = register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion));
    if (stride != 1 || in != planes * kExpansion) {
      shortcut_ =
          register_module("shortcut", torch::nn::Sequential(conv(in, planes * kExpansion, 1, stride),
                                                            torch::nn::BatchNorm2d(planes * kExpansion)));
    }
  }

  torch::Tensor forward(torch::Tensor x) {
    auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
    out = torch::relu(bn2_->forward(conv2_->forward(out)));
    out = bn3_->forward(conv3_->forward(out));
    return torch::relu(out + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(Bottleneck);

// torchvision's initialisation: He normal (fan out) for convolutions; BatchNorm starts as identity.
void initialise(torch::nn::Module& network) {
  torch::NoGradGuard no_grad;
  for (auto& module : network.modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    }
  }
}

}  // namespace

NetworkPtr build_resnet(const config::ModelConfig& config, const InputSpec& input, int depth) {
  const std::string kind = fmt::format("resnet{}", depth);
  require_image_input(kind, input);
  require_classes(kind, input);
  TORCH_INTERNAL_ASSERT(depth == 18 || depth == 50);
  const bool bottleneck = depth == 50;
  const std::vector<int> blocks = bottleneck ? std::vector<int>{3, 4, 6, 3} : std::vector<int>{2, 2, 2, 2};

  torch::nn::Sequential layers;
  const auto channels = input.sample_shape[0];
  if (config.stem == config::Stem::Cifar) {
    layers->push_back(conv(channels, 64, 3, 1));
    layers->push_back(torch::nn::BatchNorm2d(64));
    layers->push_back(torch::nn::ReLU());
  } else {  // imagenet
    layers->push_back(conv(channels, 64, 7, 2));
    layers->push_back(torch::nn::BatchNorm2d(64));
    layers->push_back(torch::nn::ReLU());
    layers->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1)));
  }
  std::int64_t in = 64;
  std::vector<std::size_t> residual_blocks;
  for (std::size_t stage = 0; stage < blocks.size(); ++stage) {
    const std::int64_t planes = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      residual_blocks.push_back(layers->size());
      if (bottleneck) {
        layers->push_back(Bottleneck(in, planes, stride));
        in = planes * BottleneckImpl::kExpansion;
      } else {
        layers->push_back(BasicBlock(in, planes, stride));
        in = planes;
      }
    }
  }
  layers->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  layers->push_back(torch::nn::Flatten());
  if (config.dropout > 0.0) layers->push_back(torch::nn::Dropout(config.dropout));
  layers->push_back(Linear(in, input.num_classes));
  auto network = std::make_shared<Network>(kind, layers);
  network->set_blocks(std::move(residual_blocks));
  initialise(*network);
  return network;
}

}  // namespace dtrain::models::detail
