// recompute(): the autograd node of Note [Activation recomputation], and the choice of blocks.
#include "dtrain/models/Recompute.h"

#include <ATen/core/ivalue.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/autograd.h>

#include <stdexcept>
#include <utility>

#include "dtrain/models/KeptState.h"
#include "dtrain/models/Network.h"
#include "dtrain/optim/Autocast.h"

namespace dtrain::models {

namespace {

// What the node keeps from the forward besides the input: the stage, and the state its forward ran in.
struct RecomputeState : torch::CustomClassHolder {
  torch::nn::AnyModule stage;
  bool input_needs_grad = false;
  GeneratorStates generators;
  bool cpu_autocast = false;
  at::ScalarType cpu_autocast_dtype = at::kBFloat16;
  bool cuda_autocast = false;
  at::ScalarType cuda_autocast_dtype = at::kHalf;
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  // `anchor` (empty) needs a gradient, so that the node is recorded and backward reaches the stage's
  // parameters also where `input` needs none (raw data); its gradient stays undefined.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& input, const torch::Tensor& /*anchor*/,
                                                c10::intrusive_ptr<RecomputeState> state) {
    ctx->save_for_backward({input});
    // Casts made without a graph must not be cached for the second forward (Note [Activation
    // recomputation]).
    optim::AutocastCacheOff no_cache;
    auto output = state->stage.forward(input);
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return {output};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    auto input = ctx->get_saved_variables().at(0).detach();
    if (state->input_needs_grad) input.requires_grad_(true);
    // Put back after backward: BatchNorm counts each batch once.
    KeepBuffers buffers(*state->stage.ptr());
    torch::Tensor output;
    {
      const auto after = GeneratorStates::now(input.device());
      state->generators.restore();
      optim::AutocastGuard cpu(state->cpu_autocast, state->cpu_autocast_dtype, at::kCPU);
      optim::AutocastGuard cuda(state->cuda_autocast, state->cuda_autocast_dtype, at::kCUDA);
      torch::AutoGradMode grad_mode(true);
      output = state->stage.forward(input);
      after.restore();
    }
    if (output.requires_grad() && grads.at(0).defined()) {
      torch::autograd::backward({output}, {grads[0]});
    }
    buffers.restore();
    // One gradient per argument of forward(), the state's included.
    return {state->input_needs_grad ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool any_learns(const torch::nn::Module& module) {
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (p.requires_grad()) return true;
  }
  return false;
}

}  // namespace

torch::Tensor recompute(const torch::nn::AnyModule& stage, const torch::Tensor& input) {
  const bool input_needs_grad = input.requires_grad();
  if (!torch::GradMode::is_enabled() || !(input_needs_grad || any_learns(*stage.ptr()))) {
    auto plain = stage;  // AnyModule's forward is not const; a copy wraps the same module
    return plain.forward(input);
  }
  auto state = c10::make_intrusive<RecomputeState>();
  state->stage = stage;
  state->input_needs_grad = input_needs_grad;
  state->generators = GeneratorStates::now(input.device());
  state->cpu_autocast = optim::autocast_enabled(at::kCPU);
  state->cpu_autocast_dtype = optim::autocast_dtype(at::kCPU);
  if (input.is_cuda()) {
    state->cuda_autocast = optim::autocast_enabled(at::kCUDA);
    state->cuda_autocast_dtype = optim::autocast_dtype(at::kCUDA);
  }
  const auto anchor = torch::empty({0}, torch::TensorOptions().requires_grad(true));
  return RecomputeFunction::apply(input, anchor, std::move(state)).at(0);
}

std::vector<std::size_t> recomputed_blocks(config::ActivationCheckpointing mode, int every,
                                           std::size_t blocks) {
  std::vector<std::size_t> out;
  if (mode == config::ActivationCheckpointing::None) return out;
  const auto k = mode == config::ActivationCheckpointing::Full
                     ? std::size_t{1}
                     : static_cast<std::size_t>(every > 0 ? every : 2);
  for (std::size_t b = k - 1; b < blocks; b += k) out.push_back(b);
  return out;
}

void apply_activation_checkpointing(Network& network, config::ActivationCheckpointing mode, int every) {
  const auto name = config::kActivationCheckpointingNames.name(mode);
  if (every != 0 && mode != config::ActivationCheckpointing::Selective) {
    throw std::invalid_argument(
        fmt::format("train.activation_checkpointing_every: {} applies to train.activation_checkpointing: "
                    "selective, but it is {}; set it to selective or leave the key out",
                    every, name));
  }
  if (mode == config::ActivationCheckpointing::None) {
    network.set_recomputed({});
    return;
  }
  const auto& blocks = network.blocks();
  if (blocks.empty()) {
    throw std::invalid_argument(fmt::format(
        "train.activation_checkpointing: {}: model {} has no blocks to recompute (its layers are single "
        "operations); transformer, vit, the resnets and a model of one's own (each stage a block) have them, "
        "or leave it at none",
        name, network.kind()));
  }
  std::vector<std::size_t> stages;
  for (const auto b : recomputed_blocks(mode, every, blocks.size())) stages.push_back(blocks[b]);
  if (stages.empty()) {
    throw std::invalid_argument(
        fmt::format("train.activation_checkpointing_every: {} is more than model {}'s {} blocks, so no block "
                    "would be recomputed; choose at most {}",
                    every, network.kind(), blocks.size(), blocks.size()));
  }
  network.set_recomputed(std::move(stages));
}

std::string describe_recomputation(const Network& network, config::ActivationCheckpointing mode) {
  if (mode == config::ActivationCheckpointing::None) return "";
  std::vector<std::size_t> stages;
  for (const auto s : network.blocks()) {
    if (network.recomputed(s)) stages.push_back(s);
  }
  return fmt::format("activation checkpointing: {}, {} of {} blocks recomputed (stages {})",
                     config::kActivationCheckpointingNames.name(mode), stages.size(), network.blocks().size(),
                     fmt::join(stages, ", "));
}

}  // namespace dtrain::models
