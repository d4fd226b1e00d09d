// The trainer as a library under a launcher's restarts: a program like examples/train_library.cpp
// whose loss fails on every rank at step 25 of the job's first attempt (the launcher's
// TORCHELASTIC_RESTART_COUNT is 0), after the checkpoint of step 20; the launcher's restart must
// continue from that checkpoint in the same run folder to the uninterrupted run's end.
//   dtrain launch --nproc-per-node 2 --max-restarts 1 -- library_restart RUN_DIR [fail]
#include <torch/torch.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "dtrain/cli/Main.h"
#include "dtrain/data/UserDataset.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/optim/Loss.h"

namespace {

class Points final : public dtrain::data::ExampleDataset {
 public:
  Points(std::int64_t size, std::uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    points_ = torch::randn({size, 3}, generator);
    labels_ = points_.sum(1).gt(0).to(torch::kLong);
  }
  std::int64_t size() const override { return labels_.size(0); }
  dtrain::data::Example get(std::int64_t i) const override {
    return {points_[i], labels_[i].item<std::int64_t>()};
  }

 private:
  torch::Tensor points_, labels_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool fail =
      argc > 2 && std::strcmp(argv[2], "fail") == 0 && (!restarts || std::string(restarts) == "0");
  auto calls = std::make_shared<std::atomic<int>>(0);
  dtrain::models::register_model({"points-net", "3 -> 8 -> 2"}, [](const auto&, const auto&) {
    return dtrain::models::network(
        "points-net",
        torch::nn::Sequential(torch::nn::Linear(3, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2)));
  });
  dtrain::data::register_dataset({"points", "points in 3-D"}, [](const auto&) {
    return dtrain::data::ExampleSplits{std::make_shared<Points>(1024, 1), std::make_shared<Points>(256, 2),
                                       2};
  });
  // Training calls the loss once a step (evaluation computes its own): the 25th call is step 25's.
  dtrain::optim::register_loss({"failing", "cross-entropy that fails once"},
                               [fail, calls](const auto& out, const auto& y) {
                                 if (fail && out.requires_grad() && ++*calls == 25)
                                   throw std::runtime_error("the test's failure at step 25");
                                 return torch::nn::functional::cross_entropy(out, y);
                               });
  dtrain::config::RunConfig config;
  config.model.name = "points-net";
  config.data.dataset = "points";
  config.data.batch_size = 32;  // 16 steps an epoch on each of 2 ranks
  config.optim.loss = "failing";
  config.optim.lr = 0.1;
  config.train.epochs = 3;
  config.train.checkpoint_every_steps = 10;
  dtrain::cli::TrainOptions options;
  options.run_dir = argv[1];
  return dtrain::cli::train(config, options);
}
