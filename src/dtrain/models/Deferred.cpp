// Deferred initialisation of a Network's stages; see Note [Deferred initialisation] in Network.h.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <stdexcept>
#include <utility>

#include "dtrain/models/Network.h"
#include "dtrain/util/Allocator.h"

namespace dtrain::models {
namespace {

at::Generator& global_generator() {
  static at::Generator generator = at::detail::getDefaultCPUGenerator();
  return generator;
}

torch::Tensor generator_state() {
  auto& generator = global_generator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_generator_state(const torch::Tensor& state) {
  auto& generator = global_generator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// What set_data() does once it has checked that the two tensors are of one kind, which a meta
// tensor and a CPU one are not (their dispatch keys differ): the parameter takes `data`'s storage,
// sizes, dtype and device in place, so every module member that holds it sees the change. A
// parameter of a deferred stage has never been through a backward, so it has no gradient
// accumulator for set_data() to reset.
void replace_data(const torch::Tensor& parameter, const torch::Tensor& data) {
  parameter.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

// Every parameter of `module` replaced by a meta tensor of its shape and dtype: the storage freed.
void to_meta(torch::nn::Module& module) {
  for (auto& p : module.parameters(/*recurse=*/true))
    replace_data(p, torch::empty(p.sizes(), p.options().device(torch::kMeta)));
}

}  // namespace

std::mutex& generator_mutex() {
  static std::mutex mutex;
  return mutex;
}

NetworkPtr eager_network(std::string kind, const std::vector<StageBuilder>& builders) {
  torch::nn::Sequential layers;
  for (const auto& build : builders) layers->push_back(build());
  return std::make_shared<Network>(std::move(kind), std::move(layers));
}

NetworkPtr deferred_network(std::string kind, std::vector<StageBuilder> builders) {
  torch::nn::Sequential layers;
  std::vector<torch::Tensor> states;
  for (const auto& build : builders) {
    states.push_back(generator_state());
    auto stage = build();
    to_meta(*stage.ptr());
    layers->push_back(std::move(stage));
  }
  auto network = std::make_shared<Network>(std::move(kind), std::move(layers));
  network->builders_ = std::move(builders);
  network->generator_states_ = std::move(states);
  network->stage_built_.assign(network->builders_.size(), false);
  util::return_freed_memory();
  return network;
}

bool Network::stage_deferred(std::size_t stage) const {
  return deferred() && stage < stage_built_.size() && !stage_built_[stage];
}

torch::nn::AnyModule Network::build_stage(std::size_t stage) const {
  // The generator as the eager build had it before this stage, and as it was again afterwards.
  std::lock_guard<std::mutex> lock(generator_mutex());
  const auto before = generator_state();
  set_generator_state(generator_states_[stage]);
  auto built = builders_[stage]();
  set_generator_state(before);
  return built;
}

void Network::materialize(const std::vector<std::size_t>& stages) {
  const auto children = layers_->named_children();
  for (const auto stage : stages) {
    if (stage >= children.size()) {
      throw std::invalid_argument(
          fmt::format("Network::materialize: stage {} of a network of {} stages", stage, children.size()));
    }
    if (!stage_deferred(stage)) continue;
    auto built = build_stage(stage);
    const auto whole = built.ptr()->named_parameters(/*recurse=*/true);
    const std::string prefix = "layers." + children[stage].key() + ".";
    torch::NoGradGuard no_grad;
    for (auto& p : children[stage].value()->named_parameters(/*recurse=*/true)) {
      const auto* source = whole.find(p.key());
      if (!source) {
        throw std::logic_error(
            fmt::format("Network::materialize: stage {} built again has no parameter {}", stage, p.key()));
      }
      auto kept = source->detach();
      for (const auto& cut : cuts_) kept = cut(prefix + p.key(), kept);
      if (kept.sizes() != p.value().sizes()) {
        throw std::logic_error(fmt::format("Network::materialize: {}{} is {} where the network holds {}",
                                           prefix, p.key(), fmt::join(kept.sizes(), "x"),
                                           fmt::join(p.value().sizes(), "x")));
      }
      // In the dtype the network was given meanwhile (to(torch::kDouble) works on shapes too); a
      // cut's result may view the whole tensor, so it is copied to a tensor of its own.
      replace_data(p.value(), kept.to(device_, p.value().scalar_type()).clone());
    }
    stage_built_[stage] = true;
  }
  util::return_freed_memory();
}

void Network::materialize_all() {
  std::vector<std::size_t> all(layers_->size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  materialize(all);
}

void Network::add_cut(Cut cut) {
  cuts_.push_back(std::move(cut));
}

void Network::for_each_built_stage(
    const std::function<void(std::size_t stage, torch::nn::Module& built)>& visit) const {
  for (std::size_t stage = 0; stage < builders_.size(); ++stage) {
    auto built = build_stage(stage);
    visit(stage, *built.ptr());
  }
  util::return_freed_memory();
}

}  // namespace dtrain::models
