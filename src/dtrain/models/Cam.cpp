// Class activation maps: the network's split at global average pooling, the maps, and their
// rendering (see Cam.h).
//
// Zhou et al.'s code (github.com/zhoubolei/CAM, py_CAM.py) takes the last convolution's output
// through a forward hook, forms weight[c] @ features reshaped (K, h*w), subtracts the minimum,
// divides by the maximum, scales to 0..255 and resizes that 8-bit map with OpenCV (to 256x256, then
// to the image) before applying its jet colour map and adding 0.3 heat + 0.5 image. dtrain splits its Network
// at the pooling stage instead of a hook, upsamples before normalising (bilinear, as cv2.resize; the maximum
// then stays 1), keeps floats until the end, and blends with weights that sum to one so the result needs no
// clipping.
#include "dtrain/models/Cam.h"

#include <fmt/format.h>

#include <stdexcept>

namespace dtrain::models {
namespace {

namespace F = torch::nn::functional;

bool is_global_average_pool(const torch::nn::Module& module) {
  const auto* pool = module.as<torch::nn::AdaptiveAvgPool2d>();
  if (!pool) return false;
  const auto& size = pool->options.output_size();
  for (const auto& side : *size) {
    if (!side.has_value() || *side != 1) return false;
  }
  return true;
}

torch::Tensor to_rgb_float(const torch::Tensor& image) {
  TORCH_CHECK(image.dim() == 3 && (image.size(0) == 1 || image.size(0) == 3),
              "CAM: an image must be (C, H, W) with C = 1 or 3, got ", image.sizes());
  auto x = image.to(torch::kFloat).clamp(0.0, 1.0);
  return x.size(0) == 1 ? x.expand({3, x.size(1), x.size(2)}).contiguous() : x;
}

torch::Tensor to_bytes(const torch::Tensor& x) {
  return x.mul(255.0).round_().clamp_(0, 255).to(torch::kUInt8);
}

}  // namespace

GapClassifier find_gap_classifier(const Network& network) {
  auto layers = network.layers();
  const std::size_t n = layers->size();
  // From the end: one Linear, then any Flatten or Dropout, then the pooling.
  std::size_t i = n;
  if (i > 0 && layers[i - 1]->as<torch::nn::Linear>()) {
    const std::size_t linear = --i;
    while (i > 0 && (layers[i - 1]->as<torch::nn::Flatten>() || layers[i - 1]->as<torch::nn::Dropout>())) --i;
    if (i > 1 && is_global_average_pool(*layers[i - 1])) return GapClassifier{i - 1, linear};
  }
  throw std::invalid_argument(fmt::format(
      "model.name: {} has no global average pooling before its classifier; CAM needs resnet18 or resnet50",
      network.kind()));
}

CamForward cam_forward(Network& network, const torch::Tensor& images) {
  const auto split = find_gap_classifier(network);
  auto stages = network.stages();
  const bool was_training = network.is_training();
  network.eval();
  torch::NoGradGuard no_grad;
  CamForward out;
  auto x = images;
  for (std::size_t i = 0; i < split.pool; ++i) x = stages[i].forward(x);
  TORCH_CHECK(x.dim() == 4, "CAM: the layers before global average pooling gave shape ", x.sizes(),
              "; expected feature maps (N, K, h, w)");
  out.features = x.contiguous();
  for (std::size_t i = split.pool; i < stages.size(); ++i) x = stages[i].forward(x);
  out.logits = x;
  out.weight = network.layers()[split.linear]->as<torch::nn::Linear>()->weight.detach();
  network.train(was_training);
  return out;
}

torch::Tensor class_activation_maps(const torch::Tensor& features, const torch::Tensor& weight,
                                    const torch::Tensor& classes) {
  TORCH_CHECK(features.dim() == 4 && weight.dim() == 2 && weight.size(1) == features.size(1),
              "CAM: features (N, K, h, w) and weight (classes, K) do not fit: ", features.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(classes.dim() == 2 && classes.size(0) == features.size(0), "CAM: classes must be (N, J), got ",
              classes.sizes());
  const auto n = features.size(0), k = features.size(1), h = features.size(2), w = features.size(3);
  const auto picked =
      weight.index_select(0, classes.reshape({-1})).view({n, classes.size(1), k});  // (N, J, K)
  return torch::bmm(picked, features.reshape({n, k, h * w})).view({n, classes.size(1), h, w});
}

torch::Tensor upsample_normalised(const torch::Tensor& maps, std::int64_t height, std::int64_t width) {
  auto up = F::interpolate(maps.to(torch::kFloat), F::InterpolateFuncOptions()
                                                       .size(std::vector<std::int64_t>{height, width})
                                                       .mode(torch::kBilinear)
                                                       .align_corners(false));
  const auto flat = up.flatten(2);
  const auto low = std::get<0>(flat.min(2, /*keepdim=*/true));
  const auto range = std::get<0>(flat.max(2, /*keepdim=*/true)) - low;
  // A flat map has nothing to show; dividing by its zero range would give NaN.
  const auto safe = torch::where(range > 0, range, torch::ones_like(range));
  return ((flat - low) / safe * (range > 0)).view_as(up);
}

torch::Tensor jet(const torch::Tensor& map) {
  TORCH_CHECK(map.dim() == 2, "CAM: jet expects a map (H, W), got ", map.sizes());
  const auto v = map.to(torch::kFloat).clamp(0.0, 1.0) * 4.0;
  auto channel = [&](double centre) { return (1.5 - (v - centre).abs()).clamp(0.0, 1.0); };
  return torch::stack({channel(3.0), channel(2.0), channel(1.0)});
}

CamPanels render_cam(const torch::Tensor& image, const torch::Tensor& map, double alpha) {
  const auto rgb = to_rgb_float(image);
  TORCH_CHECK(map.dim() == 2 && map.size(0) == rgb.size(1) && map.size(1) == rgb.size(2), "CAM: the map ",
              map.sizes(), " does not fit the image ", image.sizes());
  const auto heat = jet(map);
  return CamPanels{to_bytes(rgb), to_bytes(heat), to_bytes(rgb * (1.0 - alpha) + heat * alpha)};
}

torch::Tensor image_row(const std::vector<torch::Tensor>& images, std::int64_t gap) {
  TORCH_CHECK(!images.empty(), "CAM: no images for a row");
  std::int64_t height = 0, width = 0;
  for (const auto& im : images) {
    height = std::max(height, im.size(1));
    width += im.size(2);
  }
  width += gap * static_cast<std::int64_t>(images.size() - 1);
  auto out = torch::full({3, height, width}, 255, torch::kUInt8);
  std::int64_t x = 0;
  for (const auto& im : images) {
    out.narrow(1, 0, im.size(1)).narrow(2, x, im.size(2)).copy_(im);
    x += im.size(2) + gap;
  }
  return out;
}

torch::Tensor image_column(const std::vector<torch::Tensor>& rows, std::int64_t gap) {
  TORCH_CHECK(!rows.empty(), "CAM: no rows for a column");
  std::int64_t height = 0, width = 0;
  for (const auto& row : rows) {
    height += row.size(1);
    width = std::max(width, row.size(2));
  }
  height += gap * static_cast<std::int64_t>(rows.size() - 1);
  auto out = torch::full({3, height, width}, 255, torch::kUInt8);
  std::int64_t y = 0;
  for (const auto& row : rows) {
    out.narrow(1, y, row.size(1)).narrow(2, 0, row.size(2)).copy_(row);
    y += row.size(1) + gap;
  }
  return out;
}

torch::Tensor enlarge(const torch::Tensor& image, std::int64_t factor) {
  if (factor <= 1) return image;
  return image.repeat_interleave(factor, 1).repeat_interleave(factor, 2).contiguous();
}

}  // namespace dtrain::models
