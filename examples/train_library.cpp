// The trainer as a library: a model, a data set and a loss of your own, and the run's configuration
// in code. dtrain::run::train gives what `dtrain train` gives: any strategy by name, the run folder
// (config.yaml, log, metrics.jsonl and .csv, TensorBoard, checkpoints, model.pt, results.json),
// resuming (TrainOptions::resume). Each process is one worker; start them with any launcher:
//   dtrain launch --nproc-per-node 2 -- example_train_library [STRATEGY]    (default zero)
#include <torch/torch.h>

#include <memory>

#include "dtrain/data/UserDataset.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/optim/Loss.h"
#include "dtrain/run/Run.h"

namespace {

// Two rings around the origin, one class each: separable, but not by a line.
class Rings final : public dtrain::data::ExampleDataset {
 public:
  Rings(std::int64_t size, std::uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    labels_ = torch::randint(0, 2, {size}, generator);
    const auto angle = torch::rand({size}, generator) * 2 * M_PI;
    const auto radius = 1 + 2 * labels_.to(torch::kFloat) + 0.3 * torch::randn({size}, generator);
    points_ = torch::stack({radius * angle.cos(), radius * angle.sin()}, 1);
  }
  std::int64_t size() const override { return labels_.size(0); }
  dtrain::data::Example get(std::int64_t i) const override {
    return {points_[i], labels_[i].item<std::int64_t>()};
  }

 private:
  torch::Tensor points_, labels_;
};

struct RingNetImpl : torch::nn::Module {
  RingNetImpl()
      : hidden(register_module("hidden", torch::nn::Linear(2, 32))),
        out(register_module("out", torch::nn::Linear(32, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(hidden(x))); }
  torch::nn::Linear hidden, out;
};
TORCH_MODULE(RingNet);

}  // namespace

int main(int argc, char** argv) {
  namespace F = torch::nn::functional;
  dtrain::models::register_model(
      {"ringnet", "two linear layers for the rings"},
      [](const auto&, const auto&) { return dtrain::models::network("ringnet", RingNet()); });
  dtrain::data::register_dataset({"rings", "two rings around the origin"}, [](const auto&) {
    return dtrain::data::ExampleSplits{std::make_shared<Rings>(4000, 1), std::make_shared<Rings>(1000, 2), 2};
  });
  dtrain::optim::register_loss(
      {"smoothed", "cross-entropy with label smoothing 0.1"}, [](const auto& out, const auto& y) {
        return F::cross_entropy(out, y, F::CrossEntropyFuncOptions().label_smoothing(0.1));
      });

  dtrain::config::RunConfig config;
  config.name = "rings";
  config.model.name = "ringnet";
  config.data.dataset = "rings";
  config.data.batch_size = 32;
  config.optim.loss = "smoothed";
  config.optim.lr = 0.1;
  config.optim.momentum = 0.9;
  config.train.epochs = 3;
  config.parallel.strategy = argc > 1 ? argv[1] : "zero";
  return dtrain::run::train(config);
}
