// The key of a parameter's entry in torch::optim::Optimizer::state(): LibTorch 1.13 keys by the
// TensorImpl address as text, 2.x by the address itself.
#pragma once

#include <torch/types.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace dtrain::optim {

template <class StateMap>
typename StateMap::key_type state_key(const StateMap&, const torch::Tensor& parameter) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << parameter.unsafeGetTensorImpl();
    return text.str();
  } else {
    return reinterpret_cast<Key>(parameter.unsafeGetTensorImpl());
  }
}

}  // namespace dtrain::optim
