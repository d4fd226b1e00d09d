// Catalyst dAD's MNIST experiment in a script of its own, in C++: an MLP of your own trained with
// rank-dAD on two sites (each Linear layer's gradient shared as rank-r factors), reporting the test
// set's accuracy, precision, recall and F1 (macro averages) in the log and results.json.
//   dtrain launch --nproc-per-node 2 -- example_mnist_rankdad [MNIST_ROOT [EPOCHS]]
// MNIST_ROOT holds MNIST's IDX files; without it, Fashion-MNIST's (Debian's dataset-fashion-mnist),
// which have the same format and shape.
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "dtrain/models/ModelFactory.h"
#include "dtrain/parallel/dad/DadOptions.h"
#include "dtrain/run/Run.h"

// The model: 784 -> 512 -> 256 -> 10, ReLU between; every Linear layer's gradient is rank-dAD's.
DTRAIN_REGISTER_MODEL(catalyst_mlp, {"catalyst-mlp", "an MLP of one's own: 784-512-256-10"},
                      [](const dtrain::config::ModelConfig&, const dtrain::models::InputSpec&) {
                        return dtrain::models::network(
                            "catalyst-mlp",
                            torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 512),
                                                  torch::nn::ReLU(), torch::nn::Linear(512, 256),
                                                  torch::nn::ReLU(), torch::nn::Linear(256, 10)));
                      });

int main(int argc, char** argv) {
  dtrain::config::RunConfig config;
  config.name = "mnist-rankdad";
  config.model.name = "catalyst-mlp";
  config.data.dataset = argc > 1 ? "mnist" : "fashion-mnist";
  if (argc > 1) config.data.root = argv[1];
  config.data.batch_size = 32;
  config.optim.name = "adam";
  config.optim.lr = 1e-3;
  config.train.epochs = argc > 2 ? std::atoi(argv[2]) : 1;
  // One epoch over a tenth of the training set keeps the example short; give EPOCHS for the full set.
  if (argc <= 2) config.data.subset_size = 6000;
  config.parallel.strategy = "rankdad";
  config.parallel.options.get<dtrain::parallel::DadOptions>("dad").rank = 2;
  return dtrain::run::train(config);
}
