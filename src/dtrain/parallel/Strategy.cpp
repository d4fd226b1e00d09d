// The Strategy contract's defaults.
#include "dtrain/parallel/Strategy.h"

#include "dtrain/optim/OptimizerState.h"

namespace dtrain::parallel {

Strategy::~Strategy() = default;

std::vector<EvalModel> Strategy::eval_models() const {
  return {EvalModel{"model", -1}};
}

comm::CommStats Strategy::count_own_communication(const comm::CommunicatorPtr& comm,
                                                  const comm::CommStats& before) {
  if (!comm) return {};
  auto traffic = comm::difference(comm->stats(), before);
  own_comm_ += traffic;
  return traffic;
}

MemoryFootprint footprint_of(const std::vector<torch::Tensor>& parameters,
                             const std::vector<torch::Tensor>& gradients,
                             const std::vector<torch::Tensor>& optimizer_state) {
  MemoryFootprint footprint;
  footprint.parameters = optim::unique_storage_bytes(parameters);
  footprint.gradients = optim::unique_storage_bytes(gradients);
  footprint.optimizer_state = optim::unique_storage_bytes(optimizer_state);
  return footprint;
}

MemoryFootprint module_footprint(const torch::nn::Module& module,
                                 const std::vector<torch::Tensor>& optimizer_state) {
  std::vector<torch::Tensor> parameters;
  std::vector<torch::Tensor> gradients;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    parameters.push_back(p);
    gradients.push_back(p.grad());
  }
  return footprint_of(parameters, gradients, optimizer_state);
}

}  // namespace dtrain::parallel
