// Your own training loop with dtrain's DataParallel, built against an installed dtrain
// (CMakeLists.txt beside it). Run it on two ranks; each prints its weights and how far they are
// from the same steps taken in one process on every rank's batch:
//   dtrain launch --nproc-per-node 2 -- ./consumer [STEPS]
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"

// Rank r's batch: fixed numbers, different on every rank.
torch::Tensor inputs_of(int rank) {
  return torch::arange(32, torch::kFloat).reshape({8, 4}).add(rank).div(10);
}
torch::Tensor targets_of(int rank) {
  return torch::arange(8, torch::kFloat).reshape({8, 1}).mul(rank + 1).div(8);
}

torch::nn::Linear make_model() {
  torch::nn::Linear model(4, 1);
  torch::NoGradGuard no_grad;
  model->weight.fill_(0.1);
  model->bias.zero_();
  return model;
}

int main(int argc, char** argv) {
  namespace comm = dtrain::comm;
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  // Rank, world size and rendezvous from the launcher's environment (dtrain launch, torchrun,
  // mpirun or srun).
  auto rendezvous = comm::resolve_rendezvous({}, dtrain::config::process_environment());
  comm::CommunicatorPtr communicator = comm::connect(comm::BackendOptions{}, rendezvous);
  const int rank = communicator->rank(), world = communicator->size();

  auto model = make_model();
  dtrain::parallel::DataParallel dp(model.ptr(), communicator);  // rank 0's weights everywhere
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    torch::mse_loss(model(inputs_of(rank)), targets_of(rank)).backward();  // buckets all-reduce
    dp.finish();  // every gradient is now the mean over ranks
    optimizer.step();
  }

  // The reference: one process takes the same steps with the mean of every rank's gradient.
  auto reference = make_model();
  torch::optim::SGD reference_optimizer(reference->parameters(), 0.1);
  for (int step = 0; step < steps; ++step) {
    reference_optimizer.zero_grad();
    for (int r = 0; r < world; ++r)
      (torch::mse_loss(reference(inputs_of(r)), targets_of(r)) / world).backward();
    reference_optimizer.step();
  }
  auto weights = torch::nn::utils::parameters_to_vector(model->parameters()).detach();
  auto expected = torch::nn::utils::parameters_to_vector(reference->parameters()).detach();
  const double difference = (weights - expected).abs().max().item<double>();
  std::string text;
  for (int64_t i = 0; i < weights.numel(); ++i)
    text += (i ? " " : "") + std::to_string(weights[i].item<float>());
  std::printf("consumer: rank %d of %d, %d steps, weights %s, max |difference| from one process %.3g\n", rank,
              world, steps, text.c_str(), difference);
  return difference < 1e-6 ? 0 : 1;
}
