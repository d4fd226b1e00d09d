// The Strategy contract's defaults.
#include "dtrain/parallel/Strategy.h"

#include "dtrain/optim/OptimizerState.h"

namespace dtrain::parallel {

Strategy::~Strategy() = default;

std::vector<EvalModel> Strategy::eval_models() const {
  return {EvalModel{"model", -1}};
}

MemoryFootprint module_footprint(const torch::nn::Module& module) {
  std::vector<torch::Tensor> parameters;
  std::vector<torch::Tensor> gradients;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    parameters.push_back(p);
    gradients.push_back(p.grad());
  }
  MemoryFootprint footprint;
  footprint.parameters = optim::unique_storage_bytes(parameters);
  footprint.gradients = optim::unique_storage_bytes(gradients);
  return footprint;
}

}  // namespace dtrain::parallel
