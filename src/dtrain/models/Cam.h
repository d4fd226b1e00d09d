// Class activation maps (Zhou et al. 2016, "Learning Deep Features for Discriminative
// Localization"; as in the Horovod/FSDP/pipeline study): for a CNN whose last convolutional feature maps
// f_k are globally average-pooled into a linear classifier with weights w^c, the map of class c is
// M_c(x, y) = sum_k w^c_k f_k(x, y). This file finds that structure in a Network, computes the
// maps, and renders them (upsampled, normalised, jet-coloured, blended with the input) as images.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "dtrain/models/Network.h"

namespace dtrain::models {

// Where a network's global average pooling and classifier are among its layers.
struct GapClassifier {
  std::size_t pool = 0;    // the AdaptiveAvgPool2d(1) stage: the layers before it give f_k
  std::size_t linear = 0;  // the final linear stage: its weight (classes, K) gives w^c_k
};

// The network's layers end in AdaptiveAvgPool2d to 1x1, Flatten, optional Dropout and one Linear
// (resnet18, resnet50). Throws std::invalid_argument otherwise: "model.name: lenet5 has no global
// average pooling before its classifier; CAM needs resnet18 or resnet50".
GapClassifier find_gap_classifier(const Network& network);

// What CAM needs from one forward pass of images (N, C, H, W), in evaluation mode, no gradients.
struct CamForward {
  torch::Tensor features;  // (N, K, h, w): the feature maps f_k before pooling
  torch::Tensor logits;    // (N, classes): the network's outputs, from those features
  torch::Tensor weight;    // (classes, K): the classifier's weights w^c_k
};
CamForward cam_forward(Network& network, const torch::Tensor& images);

// M_c = sum_k weight[c, k] features[n, k] for each image n and each of its classes[n, j]:
// features (N, K, h, w), weight (C, K), classes (N, J) int64 -> (N, J, h, w). The classifier's
// bias is left out, as in the paper: it shifts a map by a constant, which normalisation removes.
torch::Tensor class_activation_maps(const torch::Tensor& features, const torch::Tensor& weight,
                                    const torch::Tensor& classes);

// Maps (N, J, h, w) upsampled bilinearly to (height, width) and each min-max normalised to [0, 1];
// a constant map becomes all zeros (nothing stands out).
torch::Tensor upsample_normalised(const torch::Tensor& maps, std::int64_t height, std::int64_t width);

// MATLAB's jet colour map of values (H, W) in [0, 1]: (3, H, W) in [0, 1], dark blue (0) through
// cyan, yellow, to dark red (1).
torch::Tensor jet(const torch::Tensor& map);

// What one image looks like beside its maps: (C, H, W) pixels in [0, 1], C = 1 or 3.
// Returns (3, H, W) uint8 panels: the input (grey expanded to RGB), the heat map, and
// (1 - alpha) * input + alpha * heat map.
struct CamPanels {
  torch::Tensor input, heat, blend;
};
CamPanels render_cam(const torch::Tensor& image, const torch::Tensor& map, double alpha);

// Images (3, H, W) uint8 side by side in a row, `gap` white pixels between them.
torch::Tensor image_row(const std::vector<torch::Tensor>& images, std::int64_t gap);
// Rows (3, h_i, W_i) stacked, left-aligned on white, `gap` white pixels between them.
torch::Tensor image_column(const std::vector<torch::Tensor>& rows, std::int64_t gap);
// (3, H, W) uint8 enlarged by an integer factor, each pixel a factor x factor block.
torch::Tensor enlarge(const torch::Tensor& image, std::int64_t factor);

}  // namespace dtrain::models
