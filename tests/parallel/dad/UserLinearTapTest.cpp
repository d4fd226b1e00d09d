// dAD and rank-dAD on a user's model of plain torch::nn::Linear layers, tapped through the autograd
// graph: 2-D and (B, T, d) inputs, a layer used twice, and one mixed with dtrain's models::Linear give
// data_parallel's parameters while sending dAD's rows (and rank-dAD's factors); a model with nothing to
// tap is refused at construction, a weight used outside its Linear product or a layer left unused at
// the first step.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/models/Linear.h"
#include "dtrain/models/Network.h"
#include "dtrain/parallel/Registry.h"
#include "parallel/ParallelTestUtil.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

namespace nn = torch::nn;

constexpr std::int64_t kFeatures = 12;
constexpr std::int64_t kClasses = 4;
constexpr int kSteps = 20;

config::RunConfig config_with(const std::string& strategy, const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all{"model.name=mlp", "optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9",
                               "parallel.strategy=" + strategy};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_run_config("", "<user Linear test>", all);
}

// A module that applies one plain Linear layer twice: two calls of the same layer per forward.
struct TwiceImpl : nn::Module {
  TwiceImpl() : fc(register_module("fc", nn::Linear(kFeatures, kFeatures))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(torch::relu(fc(x))); }
  nn::Linear fc;
};
TORCH_MODULE(Twice);

// A Linear layer whose weight the forward also uses outside the layer: `how` picks the misuse.
struct MisusedImpl : nn::Module {
  explicit MisusedImpl(std::string how)
      : how(std::move(how)), fc(register_module("fc", nn::Linear(kFeatures, kClasses))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    if (how == "penalty") return fc(x) + 1e-3 * fc->weight.pow(2).sum();
    return torch::mm(fc->weight, x.t()).t();  // W X^T: the weight as the product's first operand
  }
  std::string how;
  nn::Linear fc;
};
TORCH_MODULE(Misused);

// A Linear layer registered but never used in forward.
struct WithUnusedImpl : nn::Module {
  WithUnusedImpl()
      : fc(register_module("fc", nn::Linear(kFeatures, kClasses))),
        spare(register_module("spare", nn::Linear(kFeatures, kClasses))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  nn::Linear fc;
  nn::Linear spare;
};
TORCH_MODULE(WithUnused);

// The user's models; "sequence" takes (B, T, kFeatures) inputs, the others (B, kFeatures).
constexpr std::int64_t kPositions = 3;
models::NetworkPtr user_model(const std::string& kind, std::uint64_t seed) {
  torch::manual_seed(seed);
  nn::Sequential seq;
  if (kind == "plain") {
    seq = nn::Sequential(nn::Linear(kFeatures, 16), nn::ReLU(), nn::Linear(16, kClasses));
  } else if (kind == "sequence") {
    // With a bias on a contiguous (B, T, d) input the product is addmm on B*T rows; without, matmul
    // folds the input to an mm.
    seq =
        nn::Sequential(nn::Linear(kFeatures, 8), nn::ReLU(), nn::Linear(nn::LinearOptions(8, 8).bias(false)),
                       nn::Flatten(), nn::Linear(kPositions * 8, kClasses));
  } else if (kind == "own") {
    seq = nn::Sequential(models::Linear(kFeatures, 16), nn::ReLU(), models::Linear(16, kClasses));
  } else if (kind == "own") {
    seq = nn::Sequential(models::Linear(kFeatures, 16), nn::ReLU(), models::Linear(16, kClasses));
  } else if (kind == "mixed") {
    seq = nn::Sequential(models::Linear(kFeatures, 16), nn::ReLU(), nn::Linear(16, kClasses));
  } else if (kind == "shared") {
    seq = nn::Sequential(Twice(), nn::ReLU(), nn::Linear(kFeatures, kClasses));
  } else if (kind == "conv") {
    seq = nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 2, 3)), nn::Flatten());
  } else if (kind == "frozen") {
    seq = nn::Sequential(nn::Linear(kFeatures, kClasses));
    seq[0]->parameters().front().set_requires_grad(false);
  } else if (kind == "penalty" || kind == "weight_first") {
    seq = nn::Sequential(Misused(kind));
  } else {
    seq = nn::Sequential(WithUnused());
  }
  return std::make_shared<models::Network>("user", seq);
}

// Per step and rank a batch of `rows` samples (with `positions`, sequences of that length).
std::vector<std::vector<data::Batch>> batches(std::int64_t steps, int world, std::int64_t rows,
                                              std::int64_t positions = 0) {
  torch::manual_seed(77);
  std::vector<std::vector<data::Batch>> out(steps);
  for (auto& step : out) {
    for (int r = 0; r < world; ++r) {
      auto x = positions ? torch::randn({rows, positions, kFeatures}) : torch::randn({rows, kFeatures});
      step.push_back({x, torch::randint(0, kClasses, {rows})});
    }
  }
  return out;
}

struct Run {
  std::vector<torch::Tensor> parameters;  // rank 0's, after the last step
  std::int64_t bytes_sent = 0;            // rank 0's, over all steps
  comm::CommStats stats;                  // rank 0's, over all steps
};

// `cfg` on 2 ranks (gloo threads), each starting from its own seed (the weight broadcast aligns them).
Run train(const std::string& kind, const config::RunConfig& cfg,
          const std::vector<std::vector<data::Batch>>& data,
          optim::Precision precision = optim::Precision::Fp32) {
  const int world = 2;
  std::vector<models::NetworkPtr> models{user_model(kind, 5), user_model(kind, 6)};
  std::vector<Run> runs(world);
  dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
    auto& run = runs[comm->rank()];
    StrategyContext context{models[comm->rank()], optim::optimizer_factory(cfg.optim),
                            optim::create_loss(cfg.optim.loss), comm, cfg.parallel};
    context.precision = precision;
    auto strategy = create_strategy(std::move(context));
    const auto before = strategy->comm_stats();
    for (const auto& step : data) run.bytes_sent += strategy->train_step(step[comm->rank()]).bytes_sent;
    run.stats = comm::difference(strategy->comm_stats(), before);
    for (const auto& entry : strategy->model_state()) run.parameters.push_back(entry.second.clone());
  });
  EXPECT_EQ(testing::max_relative_difference(runs[1].parameters, runs[0].parameters), 0.0);
  return runs[0];
}

// The all-gathers' bytes on 2 ranks over `steps` steps for `layers` tapped layers sending `values` float32
// values per rank and step: per step the layers' counts (int64) and the values, on the first step the layers'
// rows once more (the plan). An all-gather's payload is its output, the world's share.
std::uint64_t allgather_bytes(std::int64_t layers, std::int64_t values, std::int64_t steps = kSteps) {
  return 2u * (steps * (layers * 8 + values * 4) + layers * 8);
}

struct UserCase {
  std::string kind;
  std::int64_t positions;   // 0: (B, d) inputs
  std::int64_t tapped;      // Linear layers tapped
  std::int64_t dad_values;  // values dAD sends per rank and step, with 4 rows per rank
};

void PrintTo(const UserCase& c, std::ostream* os) {
  *os << c.kind;
}

class UserLinearTaps : public ::testing::TestWithParam<UserCase> {};

TEST_P(UserLinearTaps, DadEqualsDataParallelAndSendsTheRows) {
  const auto& c = GetParam();
  const auto data = batches(kSteps, 2, 4, c.positions);
  const auto dp = train(c.kind, config_with("data_parallel"), data);
  const auto dad = train(c.kind, config_with("dad"), data);
  const double difference = testing::max_relative_difference(dad.parameters, dp.parameters);
  EXPECT_LE(difference, 1e-5);
  // The taps worked: dAD all-gathered each layer's rows instead of all-reducing its gradient.
  EXPECT_NE(dad.bytes_sent, dp.bytes_sent);
  EXPECT_EQ(dad.stats.ops.at("allgather").calls, 2u * kSteps + 1);
  EXPECT_EQ(dad.stats.ops.at("allgather").bytes, allgather_bytes(c.tapped, c.dad_values));
  std::cout << "[ user-linear ] " << c.kind << ": dad vs data_parallel max relative difference " << difference
            << "; bytes sent by rank 0: dad " << dad.bytes_sent << ", data_parallel " << dp.bytes_sent
            << "\n";
}

// 4 rows per rank; a (B, T, d) layer has B*T rows, and the layer used twice 2 x 4.
INSTANTIATE_TEST_SUITE_P(
    Models, UserLinearTaps,
    ::testing::Values(UserCase{"plain", 0, 2, 4 * (kFeatures + 16) + 4 * (16 + kClasses)},
                      UserCase{"sequence", kPositions, 3,
                               12 * (kFeatures + 8) + 12 * (8 + 8) + 4 * (kPositions * 8 + kClasses)},
                      UserCase{"mixed", 0, 2, 4 * (kFeatures + 16) + 4 * (16 + kClasses)},
                      UserCase{"shared", 0, 2, 8 * (kFeatures + kFeatures) + 4 * (kFeatures + kClasses)}),
    [](const auto& info) { return info.param.kind; });

TEST(UserLinearTapsRankDad, SendsRankRFactorsPerLayer) {
  // Rank 2 with 4 rows per rank: 2 (d_in + d_out) values per layer, as on dtrain's own models.
  const auto data = batches(kSteps, 2, 4);
  const auto run = train("plain", config_with("rankdad", {"parallel.dad.rank=2"}), data);
  EXPECT_EQ(run.stats.ops.at("allgather").calls, 2u * kSteps + 1);
  EXPECT_EQ(run.stats.ops.at("allgather").bytes,
            allgather_bytes(2, 2 * (kFeatures + 16) + 2 * (16 + kClasses)));
}

TEST(UserLinearTapsPrecision, Bf16AutocastTapsThroughTheCasts) {
  // Under CPU autocast each weight reaches its product through a cast to bfloat16 (ToCopyBackward0);
  // X and Δ are bfloat16 and travel as float32, the master weights' type. Two steps: bfloat16's
  // rounding (2^-8) makes longer runs drift apart whichever way the gradient is formed.
  const auto data = batches(2, 2, 4);
  const auto plain = train("plain", config_with("dad"), data, optim::Precision::Bf16);
  EXPECT_EQ(plain.stats.ops.at("allgather").bytes,
            allgather_bytes(2, 4 * (kFeatures + 16) + 4 * (16 + kClasses), /*steps=*/2));
  // dtrain's own Linear layers record the first layer's float32 input, the graph the bfloat16 X
  // its product used: both within bfloat16's rounding of float32 data_parallel.
  const auto own = train("own", config_with("dad"), data, optim::Precision::Bf16);
  const auto fp32 = train("plain", config_with("data_parallel"), data);
  const double to_own = testing::max_relative_difference(plain.parameters, own.parameters);
  const double to_fp32 = testing::max_relative_difference(plain.parameters, fp32.parameters);
  EXPECT_LE(to_own, 1e-3);
  EXPECT_LE(to_fp32, 1e-3);
  std::cout << "[ user-linear ] bf16, 2 steps: plain torch::nn::Linear under dad vs models::Linear " << to_own
            << ", vs float32 data_parallel " << to_fp32 << "\n";
}

// The message of the std::invalid_argument or std::runtime_error `fn` throws; "" if none.
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(UserLinearTapsRefusal, AModelWithNoTrainedLinearLayerAtConstruction) {
  for (const std::string kind : {"conv", "frozen"}) {
    for (const std::string strategy : {"dad", "rankdad"}) {
      SCOPED_TRACE(kind + " under " + strategy);
      const auto cfg = config_with(strategy);
      const auto what = message_of([&] {
        dtrain::testing::run_world(
            2, [&](comm::CommunicatorPtr comm) { testing::build_strategy(cfg, user_model(kind, 5), comm); });
      });
      EXPECT_NE(what.find("parallel.strategy " + strategy + ":"), std::string::npos) << what;
      EXPECT_NE(what.find("torch::nn::Linear"), std::string::npos) << what;
      EXPECT_NE(what.find("use data_parallel"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

// The message rank 0 fails with on the first step of `kind` under dad.
std::string first_step_failure(const std::string& kind) {
  const auto cfg = config_with("dad");
  const auto data = batches(1, 2, 4);
  return message_of([&] {
    dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
      auto strategy = testing::build_strategy(cfg, user_model(kind, 5), comm);
      strategy->train_step(data[0][comm->rank()]);
    });
  });
}

TEST(UserLinearTapsRefusal, AWeightUsedOutsideItsLinearProductAtTheFirstStep) {
  for (const auto& [kind, node] : std::vector<std::pair<std::string, std::string>>{
           {"penalty", "PowBackward0"}, {"weight_first", "MmBackward0 (input 0)"}}) {
    SCOPED_TRACE(kind);
    const auto what = first_step_failure(kind);
    EXPECT_NE(what.find("Linear layer 'layers.0.fc'"), std::string::npos) << what;
    EXPECT_NE(what.find("its weight reaches " + node), std::string::npos) << what;
    EXPECT_NE(what.find("rebuild only"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(UserLinearTapsRefusal, ALinearLayerUnusedInTheForwardAtTheFirstStep) {
  const auto what = first_step_failure("unused");
  EXPECT_NE(what.find("Linear layer 'layers.0.spare' took no part in this training step"), std::string::npos)
      << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

}  // namespace
}  // namespace dtrain::parallel
