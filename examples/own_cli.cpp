// dtrain's command line over a model and a data set of your own: register them by name and end
// main() in dtrain::cli::run. This program then runs train, experiment, report and bench
// throughput with model.name blobnet and data.dataset blobs, checked and listed in --help like the
// built-in ones; its workers and restarts run this same program.
//   example_own_cli train model.name=blobnet data.dataset=blobs parallel.strategy=zero --nproc 2
//   example_own_cli train --help          # blobnet under Models, blobs under Data sets
#include <torch/torch.h>

#include <cmath>
#include <memory>

#include "dtrain/cli/Main.h"
#include "dtrain/data/UserDataset.h"
#include "dtrain/models/ModelFactory.h"

namespace {

// Points in the plane around four centres, one class each; the same points for the same seed.
class Blobs final : public dtrain::data::ExampleDataset {
 public:
  Blobs(std::int64_t size, std::uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    labels_ = torch::randint(0, 4, {size}, generator);
    const auto angle = labels_.to(torch::kFloat) * (M_PI / 2);
    points_ = torch::stack({angle.cos(), angle.sin()}, 1) * 2 + torch::randn({size, 2}, generator) * 0.5;
  }
  std::int64_t size() const override { return labels_.size(0); }
  dtrain::data::Example get(std::int64_t i) const override {
    return {points_[i], labels_[i].item<std::int64_t>()};
  }

 private:
  torch::Tensor points_, labels_;
};

}  // namespace

// A Sequential, so that every strategy takes it, pipeline included; model.hidden's first width.
DTRAIN_REGISTER_MODEL(blobnet, {"blobnet", "a small MLP for the blobs: model.hidden[0] wide"},
                      [](const dtrain::config::ModelConfig& config, const dtrain::models::InputSpec& input) {
                        const auto width = config.hidden.empty() ? 32 : config.hidden[0];
                        return dtrain::models::network(
                            "blobnet", torch::nn::Sequential(torch::nn::Linear(input.sample_shape[0], width),
                                                             torch::nn::ReLU(),
                                                             torch::nn::Linear(width, input.num_classes)));
                      });

DTRAIN_REGISTER_DATASET(blobs, {"blobs", "four Gaussian blobs in the plane, one class each"},
                        [](const dtrain::config::DataConfig&) {
                          return dtrain::data::ExampleSplits{std::make_shared<Blobs>(2000, 1),
                                                             std::make_shared<Blobs>(400, 2),
                                                             4,
                                                             {"east", "north", "west", "south"}};
                        });

int main(int argc, char** argv) {
  return dtrain::cli::run(argc, argv);
}
