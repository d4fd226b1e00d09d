// Making every rank's copy of a module identical before data-parallel training: a check that all
// ranks built the same parameters and buffers (names, shapes, dtypes), and a coalesced broadcast
// of the root's values.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"

namespace dtrain::parallel {

// One parameter or buffer as the consistency check sees it.
struct TensorDescription {
  std::string kind;   // "parameter" | "buffer"
  std::string name;   // dotted, as named_parameters() reports it
  std::string dtype;  // "float", "long", ...
  std::string shape;  // "[256, 784]"
};

std::vector<TensorDescription> describe_module(const torch::nn::Module& module);

// Collective. Throws std::invalid_argument on every rank when the ranks' modules differ, naming
// the first difference: "parameter 3 'fc1.weight': rank 0 has [256, 784] float, rank 1 has
// [128, 784] float". One 8-byte all-gather when they agree.
void verify_same_module(comm::Communicator& comm, const torch::nn::Module& module);

// Collective. Overwrites `tensors` on every rank with root's values, packed into flat buffers of
// at most `max_bucket_bytes` per dtype and device so a model costs a few broadcasts, not one per
// tensor. Every rank must pass tensors of the same shapes and dtypes in the same order.
void broadcast_coalesced(comm::Communicator& comm, const std::vector<torch::Tensor>& tensors, int root = 0,
                         std::int64_t max_bucket_bytes = 25 << 20);

// Parameters and buffers of `module` (recursively), in registration order.
std::vector<torch::Tensor> module_state(const torch::nn::Module& module);

}  // namespace dtrain::parallel
