// The model registry: builds any dtrain model by name (the names are registered with config/) from
// config::ModelConfig and the shape of the data, and describes it (parameter count, one-line summary) for the
// run's log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/models/Network.h"

namespace dtrain::models {

// Builds config.name (registered as config::kModelKey's choices; matched without regard to case) for inputs
// shaped like `input`. Parameters are registered in forward order and initialised from torch's global
// generator, so torch::manual_seed(s) before this call gives the same weights on every rank and every run.
// Throws std::invalid_argument for an unknown name or options the model cannot take (a ViT patch that does
// not divide the image).
NetworkPtr create_model(const config::ModelConfig& config, const InputSpec& input);

// Number of scalar parameters (trainable or not), buffers excluded.
std::int64_t parameter_count(const torch::nn::Module& module);
// Only those with requires_grad.
std::int64_t trainable_parameter_count(const torch::nn::Module& module);

// "lenet5: 61,706 parameters in 11 stages, input 1x28x28 -> 10 classes".
std::string summary(const Network& network, const InputSpec& input);

}  // namespace dtrain::models
