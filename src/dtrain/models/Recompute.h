// Activation recomputation (gradient checkpointing, Chen et al. 2016; torch.utils.checkpoint): a
// stage's forward keeps only its input, and backward runs that forward again to rebuild the
// activations its gradient needs. Memory for a block's activations is traded for one more forward
// of it. See Note [Activation recomputation].
#pragma once

#include <torch/nn/modules/container/any.h>

#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"

namespace dtrain::models {

class Network;

// Note [Activation recomputation]
// recompute(stage, x) runs the stage without recording a graph and hands autograd one node whose
// backward (1) restores the random generators' state of the forward (dropout draws the same mask),
// the autocast state (CPU and CUDA: the engine's thread has its own) and grad mode; (2) runs the
// stage's forward again on a detached copy of x; (3) backpropagates the incoming gradient through
// it, which accumulates the parameters' gradients as the original graph would have (the same
// AccumulateGrad nodes, so data_parallel's and zero's gradient-ready hooks fire as usual), and
// returns the gradient of x; (4) puts back the buffers the second forward changed (BatchNorm's
// running statistics and count: updated once, as without recomputation), and the generators'
// state after the step. The second forward computes what the first did, op for op, so the
// gradients and the weights after every step are those of a run without recomputation, bit for
// bit (tests/models/RecomputeTest.cpp, and tests/parallel/RecomputeStrategiesTest.cpp for every
// strategy).
// This is PyTorch's reentrant checkpoint (use_reentrant=True), written as a C++ autograd
// function: LibTorch has no torch.utils.checkpoint. Like it, a stage whose input needs no gradient
// (raw data) still trains its parameters: the node takes an empty anchor input that needs one.
// Unlike it, nothing is recomputed when grad mode is off (evaluation) or nothing in the stage
// learns. PyTorch's non-reentrant form (saved-tensor hooks) stops the recomputation early once the
// needed tensors are rebuilt; a stage here is a whole block, so the second forward is the block's.
// Threads of one process share the CPU generator: where ranks are threads and a stage draws random
// numbers (dropout), the interleaving of draws between ranks is as unordered as without it.

// Runs `stage` on `input`; where autograd records (grad mode on, and the input or one of the
// stage's parameters needs a gradient) keeps only `input` and recomputes the forward in backward.
torch::Tensor recompute(const torch::nn::AnyModule& stage, const torch::Tensor& input);

// The block indices (in Network::blocks() order, not stage indices) that train.activation_checkpointing
// recomputes among `blocks` blocks: none; every one (full); every k-th, the k-th, 2k-th, ... (selective
// with every = k, torchtitan's selective_ac_option; 0 means 2).
std::vector<std::size_t> recomputed_blocks(config::ActivationCheckpointing mode, int every,
                                           std::size_t blocks);

// Applies train.activation_checkpointing to `network`: its blocks chosen by recomputed_blocks run
// through recompute() in forward() and stages(). Throws std::invalid_argument naming the key when the
// network has no blocks (a model whose layers are single operations) or `every` is set without
// selective.
void apply_activation_checkpointing(Network& network, config::ActivationCheckpointing mode, int every);

// For the run's log: "activation checkpointing: selective, 3 of 6 blocks recomputed (stages 2, 4, 6)";
// empty with none.
std::string describe_recomputation(const Network& network, config::ActivationCheckpointing mode);

}  // namespace dtrain::models
