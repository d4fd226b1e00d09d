// Transfer learning (as in the Horovod/FSDP/pipeline study): a freshly built model takes its initial
// weights from a dtrain checkpoint, a run folder or an exported model.pt, matched by name and shape, and
// some of its parameters can be frozen by name pattern. The Trainer applies both after building the model
// and before the strategy takes it over, identically on every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/models/Network.h"

namespace dtrain::train {

// The file that model.init_from names: a file as it is; a run folder's model.pt, else the latest
// checkpoint under its checkpoints/ (or the folder itself when it is a checkpoints/ folder).
// Throws std::invalid_argument when there is none, its message starting with `what` (the key or
// argument that named the path).
std::filesystem::path weights_file(const std::string& path, const std::string& what = "model.init_from");

// The model's tensors in a weights file: a dtrain checkpoint's "model.<name>" entries, or a
// torch.save dict of name -> tensor (dtrain's model.pt, or Python's torch.save(model.state_dict())).
// Throws std::invalid_argument naming the file when it is neither, the message starting with `what`.
std::map<std::string, at::Tensor> read_model_weights(const std::filesystem::path& file,
                                                     const std::string& what = "model.init_from");

// The Hugging Face checkpoint model.init_from names, if it names one: a *.safetensors file, a
// pytorch_model.bin, or a folder save_pretrained wrote (its model.safetensors, else its
// pytorch_model.bin); nullopt for anything else (a dtrain checkpoint, run folder or model.pt).
std::optional<std::filesystem::path> hugging_face_file(const std::string& path);

// What init_from did, for the run's log.
struct TransferReport {
  std::string source;               // the file read
  std::vector<std::string> loaded;  // model tensors copied from it
  // Model tensors that kept their initialisation: "name (checkpoint [10, 84], model [5, 84])" or
  // "name (not in the checkpoint)".
  std::vector<std::string> kept;
  std::vector<std::string> unused;  // checkpoint tensors the model has no place for
  // "classifier head layers.10 (10 -> 5 outputs) keeps its fresh initialisation", or empty.
  std::string head;
  std::vector<std::string> frozen;  // parameters frozen by model.freeze
  // One line each, for the log: the summary, then what was kept, unused and frozen.
  std::vector<std::string> lines() const;
};

// Copies `weights` into the network's parameters and buffers with equal names and shapes. strict:
// throws std::invalid_argument listing the first mismatches (missing, mis-shaped or unexpected
// tensors) and naming model.init_strict; otherwise loads what matches, reports the rest, and
// throws only when nothing matches at all (weights of another model).
TransferReport load_matching(models::Network& network, const std::map<std::string, at::Tensor>& weights,
                             bool strict, const std::string& source);

// '*' matches any run of characters (dots included), '?' one character; the rest literally.
bool glob_match(const std::string& pattern, const std::string& name);

// Sets requires_grad false on every parameter matched by one of `patterns`; returns their names in
// registration order. Throws std::invalid_argument naming model.freeze for a pattern that matches
// no parameter (a typo would otherwise train everything), listing a few of the names there are.
std::vector<std::string> freeze_parameters(torch::nn::Module& module,
                                           const std::vector<std::string>& patterns);

// The Hugging Face checkpoint `file` read into the network through its model's import
// (models::hugging_face_import): every tensor the model needs found with its shape, a missing
// classification head left as initialised (in the report's kept), the rest of the file in unused.
// Throws std::invalid_argument naming the file and the tensor otherwise, and for a model that reads no
// Hugging Face checkpoint.
TransferReport load_hugging_face(models::Network& network, const std::filesystem::path& file, bool strict);

// model.init_from and model.freeze, applied to a freshly built network. A resumed run builds its
// trainer without init_from (its checkpoint holds the weights) and keeps freeze.
TransferReport apply_transfer(models::Network& network, const config::ModelConfig& config);

}  // namespace dtrain::train
