// The builders behind create_model(), one per architecture family. Internal to dtrain_models:
// callers go through ModelFactory.h, which validates the name; each builder validates its options.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/config/RunConfig.h"
#include "dtrain/models/Network.h"

namespace dtrain::models::detail {

NetworkPtr build_mlp(const config::ModelConfig& config, const InputSpec& input);
NetworkPtr build_mnistnet(const config::ModelConfig& config, const InputSpec& input);
NetworkPtr build_dinnocnn(const config::ModelConfig& config, const InputSpec& input);
NetworkPtr build_lenet5(const config::ModelConfig& config, const InputSpec& input);
// blocks_per_stage {2,2,2,2} with basic blocks = ResNet-18; {3,4,6,3} with bottlenecks = ResNet-50.
NetworkPtr build_resnet(const config::ModelConfig& config, const InputSpec& input, int depth);
NetworkPtr build_vit(const config::ModelConfig& config, const InputSpec& input);
NetworkPtr build_transformer(const config::ModelConfig& config, const InputSpec& input);
// tied: the output layer computes with the token embedding's weight (GPT-2); else a Linear of its own.
NetworkPtr build_gpt(const config::ModelConfig& config, const InputSpec& input, bool tied = true);
NetworkPtr build_albert(const config::ModelConfig& config, const InputSpec& input);

// Throws std::invalid_argument unless the input is an image (C, H, W) with positive sizes.
void require_image_input(const std::string& model, const InputSpec& input);
// Throws unless input.num_classes > 0.
void require_classes(const std::string& model, const InputSpec& input);

}  // namespace dtrain::models::detail
