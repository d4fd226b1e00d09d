// The model registry: builds any dtrain model by name (the names are registered with config/) from
// config::ModelConfig and the shape of the data, and describes it (parameter count, one-line summary) for the
// run's log.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/models/HuggingFace.h"
#include "dtrain/models/Network.h"

namespace dtrain::models {

// Builds config.name (registered as config::kModelKey's choices; matched without regard to case) for inputs
// shaped like `input`. Parameters are registered in forward order and initialised from torch's global
// generator, so torch::manual_seed(s) before this call gives the same weights on every rank and every run.
// Throws std::invalid_argument for an unknown name or options the model cannot take (a ViT patch that does
// not divide the image).
NetworkPtr create_model(const config::ModelConfig& config, const InputSpec& input);

// Builds a model for inputs shaped like `input` from the model.* options (a model of one's own reads
// the ones it needs, or none).
using ModelBuilder = std::function<NetworkPtr(const config::ModelConfig& config, const InputSpec& input)>;

// Registers a model of one's own under choice.name (with choice.help for `--help` and any aliases), so
// that model.name selects it wherever a configuration is read: the trainer, and the train,
// experiment and bench throughput commands of a program that runs dtrain's command line
// (dtrain/cli/Main.h). `build` runs on every rank after torch::manual_seed(train.seed), so it must
// draw its initial weights from torch's global generator to give every rank and run the same ones
// (see network() in Network.h for wrapping a module). Call it before any configuration is parsed:
// in main(), or at static initialisation through DTRAIN_REGISTER_MODEL. Returns true; throws
// std::logic_error when the name or an alias is taken.
bool register_model(config::Choice choice, ModelBuilder build);

// At namespace scope in any source file of the program:
//   DTRAIN_REGISTER_MODEL(mynet, {"mynet", "my network"}, [](const auto&, const auto& in) {...});
#define DTRAIN_REGISTER_MODEL(id, ...) \
  [[maybe_unused]] static const bool dtrain_model_##id = ::dtrain::models::register_model(__VA_ARGS__)

// How model `kind` (Network::kind()) reads a Hugging Face checkpoint, or null when it reads none.
const HuggingFaceImport* hugging_face_import(const std::string& kind);

// Number of scalar parameters (trainable or not), buffers excluded.
std::int64_t parameter_count(const torch::nn::Module& module);
// Only those with requires_grad.
std::int64_t trainable_parameter_count(const torch::nn::Module& module);

// "lenet5: 61,706 parameters in 11 stages, input 1x28x28 -> 10 classes".
std::string summary(const Network& network, const InputSpec& input);

}  // namespace dtrain::models
