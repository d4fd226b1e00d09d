// The strategies as objects over a module of one's own (parallel/Strategies.h): rank-dAD and the
// decentralized algorithms train such a module to a separable problem's solution on 2 ranks, and
// what cannot apply is refused in one line naming it: an option out of its range, a pipeline over a
// module that is not a Sequential, dAD over a model without a Linear layer.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

#include "dtrain/parallel/Strategies.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

namespace nn = torch::nn;

struct TwoLayerImpl : nn::Module {
  TwoLayerImpl()
      : hidden(register_module("hidden", nn::Linear(4, 16))),
        out(register_module("out", nn::Linear(16, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(hidden(x))); }
  nn::Linear hidden, out;
};
TORCH_MODULE(TwoLayer);

Training parts(comm::CommunicatorPtr comm) {
  torch::manual_seed(1);
  auto sgd = [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  return {models::network("two-layer", TwoLayer()), sgd, optim::create_loss("cross_entropy"),
          std::move(comm)};
}

// Class = whether the first coordinate exceeds the sum of the others: separable by a plane.
data::Batch separable(int rows, std::uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto x = torch::randn({rows, 4}, generator);
  return {x, x.select(1, 0).gt(x.slice(1, 1).sum(1)).to(torch::kLong)};
}

// Each rank's accuracy on fresh samples after `steps` steps of 32 rows per rank (per node).
std::vector<double> train_world(const std::function<std::unique_ptr<Strategy>(Training)>& make, int steps,
                                int rows_per_step = 32) {
  std::vector<double> accuracy(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    auto strategy = make(parts(comm));
    for (int step = 0; step < steps; ++step)
      strategy->train_step(separable(rows_per_step, 100 * step + rank));
    const auto test = separable(2000, 99);
    strategy->begin_evaluation();
    accuracy[rank] = strategy->eval_forward(0, test.inputs)
                         .argmax(1)
                         .eq(test.targets)
                         .to(torch::kDouble)
                         .mean()
                         .item<double>();
    strategy->end_evaluation();
  });
  return accuracy;
}

TEST(StrategyObjects, RankDadTrainsAModuleOfOnesOwn) {
  const auto accuracy = train_world(
      [](Training t) {
        DadOptions options;
        options.rank = 1;
        return make_rankdad(std::move(t), options);
      },
      150);
  for (const double a : accuracy) EXPECT_GT(a, 0.95);
  EXPECT_EQ(accuracy[0], accuracy[1]);  // one model on every rank
}

TEST(StrategyObjects, DecentralizedAlgorithmsTrainAModuleOfOnesOwn) {
  for (const char* algorithm : {"dsgd", "cadmm", "choco"}) {
    const auto accuracy = train_world(
        [algorithm](Training t) {
          DecentralizedOptions options;
          options.algorithm = algorithm;
          GraphOptions graph;
          graph.type = "complete";
          return make_decentralized(std::move(t), options, graph);
        },
        150);
    for (const double a : accuracy) EXPECT_GT(a, 0.95) << algorithm;
  }
}

// A mesh given in code: zero replicated over both ranks (dp_shard 1), one model on every rank; and
// a mesh that does not fit the world refused as a configuration's is.
TEST(StrategyObjects, ZeroOnAMeshOfOnesOwn) {
  const auto accuracy = train_world(
      [](Training t) {
        t.mesh.dp_replicate = 2;
        return make_zero(std::move(t));
      },
      150);
  for (const double a : accuracy) EXPECT_GT(a, 0.95);
  EXPECT_EQ(accuracy[0], accuracy[1]);
  dtrain::testing::run_world(2, [](comm::CommunicatorPtr comm) {
    auto training = parts(comm);
    training.mesh.dp_shard = 4;
    try {
      make_zero(std::move(training));
      FAIL() << "a mesh of 4 ranks was taken on 2";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(
          std::string(e.what()).find("parallel.mesh: pp 1 x dp_replicate 1 x dp_shard 4 = 4 ranks, but the "
                                     "job has 2"),
          std::string::npos)
          << e.what();
    }
  });
}

TEST(StrategyObjects, OptionsAreCheckedAsAConfigurationFilesAre) {
  ZeroOptions zero;
  zero.stage = 4;
  try {
    make_zero(parts(nullptr), zero);
    FAIL() << "stage 4 was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero.stage"), std::string::npos) << e.what();
  }
}

TEST(StrategyObjects, PipelineRefusesAModuleThatIsNotASequential) {
  dtrain::testing::run_world(2, [](comm::CommunicatorPtr comm) {
    try {
      make_pipeline(parts(comm));
      FAIL() << "a pipeline over one module was built";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("two-layer is one module that is not a Sequential"), std::string::npos)
          << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  });
}

TEST(StrategyObjects, DadRefusesAModelWithoutALinearLayer) {
  dtrain::testing::run_world(2, [](comm::CommunicatorPtr comm) {
    auto training = parts(comm);
    torch::manual_seed(1);
    training.model = models::network("convolution", nn::Sequential(nn::Conv2d(1, 2, 3), nn::Flatten()));
    try {
      make_dad(std::move(training));
      FAIL() << "dad over a model without Linear layers was built";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("no torch::nn::Linear layer"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace dtrain::parallel
