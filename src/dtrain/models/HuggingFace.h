// What a model does with a Hugging Face checkpoint (model.init_from naming a model.safetensors or
// pytorch_model.bin): its tensors renamed to the model's parameter names and checked against their
// shapes. A model that can read one registers its import beside its builder (ModelFactory.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dtrain/models/Network.h"

namespace dtrain::models {

struct ImportedWeights {
  // Model parameter or buffer name -> the file's tensor, of the model's shape.
  std::map<std::string, at::Tensor> tensors;
  // Model tensors left as initialised, each with why ("layers.2.classifier.weight (classifier.weight
  // is not in the file: a fresh classification head)").
  std::vector<std::string> kept;
  // The file's tensors the model has no place for (a pre-training head, say).
  std::vector<std::string> unused;
};

// `file`: the checkpoint's tensors by Hugging Face's names; `source`: the file, for errors. Throws
// std::invalid_argument naming the file and the Hugging Face tensor for one the model needs that is
// missing or misshapen. strict (model.init_strict): a classification head of another shape is
// refused too; otherwise it keeps its fresh initialisation.
using HuggingFaceImport =
    std::function<ImportedWeights(const std::map<std::string, at::Tensor>& file, const Network& network,
                                  bool strict, const std::string& source)>;

}  // namespace dtrain::models
