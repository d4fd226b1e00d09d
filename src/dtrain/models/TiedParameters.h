// Tied parameters: a stage that computes with a parameter another stage owns, as GPT-2's output
// layer computes with the token embedding's weight. The owner registers the parameter; the user
// holds the same tensor without registering it, so the model lists it once (one optimizer entry,
// one gradient: autograd sums both uses into it). A strategy that places stages apart finds the
// users here: zero keeps the owner's unit gathered while a user runs, the pipeline gives a user
// on another rank a copy of its own (Note [Tied embeddings across pipeline stages]).
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

namespace dtrain::models {

class TiedParameterUser {
 public:
  virtual ~TiedParameterUser() = default;
  // The tensor it computes with, registered by another module (undefined when not tied).
  virtual torch::Tensor tied_parameter() const = 0;
  // Computes with `tensor` from now on: a pipeline stage's own copy of a parameter whose owner
  // lives on another rank.
  virtual void use_tied_parameter(torch::Tensor tensor) = 0;
};

// The modules of `module` (itself included) that compute with a tied parameter, with their names.
inline std::vector<std::pair<std::string, TiedParameterUser*>> tied_parameter_users(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, TiedParameterUser*>> users;
  // A module held by value cannot list itself (named_modules' include_self needs a shared_ptr).
  auto* self = dynamic_cast<TiedParameterUser*>(const_cast<torch::nn::Module*>(&module));
  if (self && self->tied_parameter().defined()) users.emplace_back("", self);
  for (const auto& item : module.named_modules("", /*include_self=*/false)) {
    auto* user = dynamic_cast<TiedParameterUser*>(item.value().get());
    if (user && user->tied_parameter().defined()) users.emplace_back(item.key(), user);
  }
  return users;
}

}  // namespace dtrain::models
