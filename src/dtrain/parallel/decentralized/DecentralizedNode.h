// One graph node's state inside DecentralizedStrategy: its parameters as one flat vector (the
// model's parameters are pointed at views of it while the node runs), its buffers, its optimizer
// and what its algorithm keeps between rounds.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/parallel/decentralized/DecentralizedStrategy.h"

namespace dtrain::parallel {

struct DecentralizedStrategy::Node {
  int index = 0;                                       // graph node
  torch::Tensor theta;                                 // (L) parameters, in the model's parameter order
  std::vector<torch::Tensor> params;                   // views of theta shaped as the model's parameters
  std::vector<torch::Tensor> buffers;                  // the node's own copies of the model's buffers
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // over the model's parameters, this node's state
  std::int64_t samples = 0;              // training samples forwarded (DiNNO's forward_pass_count)
  double bytes_sent = 0.0;               // bytes a deployment would send: each neighbour its message
  torch::Tensor dual;                    // cadmm: p_i (L)
  torch::Tensor tracker, last_gradient;  // dsgt: y_i and g_i (L)
  torch::Tensor push_weight;             // push_sum: w_i (1); theta holds the de-biased x_i / w_i
};

}  // namespace dtrain::parallel
