// Data-parallel training of your own model in your own loop: DataParallel broadcasts rank 0's
// weights and all-reduces gradient buckets while backward runs.
// Usage:
//   build/bin/dtrain launch --nproc-per-node 2 -- build/examples/example_data_parallel_loop
//   torchrun --standalone --nproc-per-node 2 --no-python build/examples/example_data_parallel_loop
#include <torch/torch.h>

#include <iostream>

#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"

struct TwoLayerNet : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(20, 64))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(64, 2))};
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
};

int main() {
  namespace comm = dtrain::comm;
  // Rank, world size and rendezvous come from the launcher's environment (torchrun's variables).
  auto rendezvous = comm::resolve_rendezvous({}, dtrain::config::process_environment());
  std::shared_ptr<comm::Communicator> communicator = comm::connect(comm::BackendOptions{}, rendezvous);

  auto model = std::make_shared<TwoLayerNet>();
  dtrain::parallel::DataParallel dp(model, communicator);  // rank 0's weights everywhere
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));

  // Each rank draws its own shard of a separable problem: the label is the sign of feature 0.
  torch::manual_seed(1234 + communicator->rank());
  for (int step = 1; step <= 200; ++step) {
    auto x = torch::randn({32, 20});
    auto y = (x.select(1, 0) > 0).to(torch::kLong);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();  // buckets all-reduce while backward runs
    dp.finish();      // waits for the last bucket; gradients are now the mean over ranks
    optimizer.step();
    if (step % 50 == 0 && communicator->rank() == 0) {
      std::cout << "step " << step << " loss " << loss.item<double>() << std::endl;
    }
  }
  // Every rank ends with the same weights: they took the same averaged steps.
  auto mine = torch::nn::utils::parameters_to_vector(model->parameters()).detach();
  auto largest = mine.clone();
  communicator->allreduce(largest, comm::ReduceOp::Max);
  if (!torch::equal(mine, largest)) std::cerr << "rank " << communicator->rank() << ": weights differ\n";
  return torch::equal(mine, largest) ? 0 : 1;
}
