// train.precision inside the strategies: the autocast guard, fp16 numerics, the loss scaler's skip,
// backoff and growth in a real step, the skip agreed by every rank of every strategy (one rank's
// overflow injected), and a resume that continues with the saved scale.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/Linear.h"
#include "dtrain/optim/Autocast.h"
#include "dtrain/parallel/MixedPrecision.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/dad/DadStrategy.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"
#include "dtrain/parallel/decentralized/DecentralizedStrategy.h"
#include "parallel/ParallelTestUtil.h"
#include "parallel/decentralized/DecentralizedTestUtil.h"

namespace dtrain::parallel {
namespace {

using optim::Precision;
using testing::build_model;
using testing::snapshot;

config::RunConfig mlp_config(const std::string& strategy = "local") {
  config::RunConfig cfg;
  cfg.model.name = "mlp";
  cfg.model.hidden = {16};
  cfg.optim.name = "sgd";
  cfg.optim.lr = 0.1;
  cfg.optim.momentum = 0.9;
  cfg.optim.loss = "cross_entropy";
  cfg.parallel.strategy = strategy;
  return cfg;
}

std::unique_ptr<Strategy> make_strategy(const config::RunConfig& cfg, models::NetworkPtr model,
                                        comm::CommunicatorPtr comm, Precision precision) {
  StrategyContext context{std::move(model), optim::optimizer_factory(cfg.optim),
                          optim::create_loss(cfg.optim.loss), std::move(comm), cfg.parallel};
  context.precision = precision;
  auto strategy = create_strategy(std::move(context));
  strategy->set_learning_rate(cfg.optim.lr);
  return strategy;
}

data::Batch batch_of(std::uint64_t seed, std::int64_t rows = 8, double input_scale = 1.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({rows, 1, 28, 28}, gen) * input_scale,
          torch::randint(0, 10, {rows}, gen, torch::kLong)};
}

// Inputs far beyond fp16's 65504: the fp16 forward overflows to inf, the loss and gradients to NaN.
constexpr double kOverflowingInputs = 1e6;

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(Autocast, GuardComputesMatmulsInBf16ForItsScopeOnly) {
  const auto a = torch::randn({4, 8});
  const auto b = torch::randn({8, 3});
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
  {
    optim::AutocastGuard outer(true);
    EXPECT_TRUE(optim::cpu_autocast_enabled());
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    {
      optim::AutocastGuard off(false);  // a disabled guard changes nothing
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    }
    EXPECT_EQ((a + a).scalar_type(), torch::kFloat);  // not a lower-precision op
  }
  EXPECT_FALSE(optim::cpu_autocast_enabled());
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
}

TEST(MixedPrecision, RoundThroughHalfOverflowsAndUnderflowsOnTheWayForwardAndBack) {
  auto x = torch::tensor({1.0F, 70000.0F, 1e-8F, 0.1F}, torch::requires_grad());
  const auto y = round_through_half(x);
  EXPECT_EQ(y[0].item<float>(), 1.0F);
  EXPECT_TRUE(std::isinf(y[1].item<float>()));  // above 65504
  EXPECT_EQ(y[2].item<float>(), 0.0F);          // below 2^-24
  EXPECT_EQ(y[3].item<float>(), static_cast<float>(at::Half(0.1F)));
  // The gradient coming back is rounded too: 1e5 overflows, 1e-9 vanishes, 3 is exact.
  (y * torch::tensor({3.0F, 0.0F, 1e5F, 1e-9F})).sum().backward();
  EXPECT_EQ(x.grad()[0].item<float>(), 3.0F);
  EXPECT_TRUE(std::isinf(x.grad()[2].item<float>()));
  EXPECT_EQ(x.grad()[3].item<float>(), 0.0F);
  const auto ids = torch::tensor({3, 70000}, torch::kLong);
  EXPECT_TRUE(torch::equal(round_through_half(ids), ids));  // token ids pass unchanged
}

// The Linear layers' outputs as the forward pass produced them, by layer.
std::vector<torch::Tensor> linear_outputs(models::Network& network, const MixedPrecision& precision,
                                          const torch::Tensor& inputs, torch::Tensor* outputs,
                                          std::vector<torch::Tensor>* linear_inputs = nullptr) {
  std::vector<torch::Tensor> seen;
  std::vector<models::LinearImpl*> taps;
  for (const auto& m : network.modules()) {
    if (auto* linear = dynamic_cast<models::LinearImpl*>(m.get())) taps.push_back(linear);
  }
  for (auto* linear : taps) {
    linear->set_tap([&](const torch::Tensor& in, const torch::Tensor& out) {
      seen.push_back(out.detach());
      if (linear_inputs) linear_inputs->push_back(in.detach());
    });
  }
  *outputs = precision.forward(network, inputs);
  for (auto* linear : taps) linear->set_tap(nullptr);
  return seen;
}

TEST(MixedPrecision, Bf16ForwardComputesLinearLayersInBf16AndHandsBackFloat32) {
  const auto cfg = mlp_config();
  auto model = build_model(cfg, 3);
  const auto x = batch_of(1).inputs;
  torch::Tensor fp32_out, bf16_out;
  const auto fp32 = linear_outputs(*model, MixedPrecision(Precision::Fp32, nullptr), x, &fp32_out);
  const auto bf16 = linear_outputs(*model, MixedPrecision(Precision::Bf16, nullptr), x, &bf16_out);
  ASSERT_EQ(bf16.size(), 2u);
  for (const auto& out : bf16) EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  for (const auto& out : fp32) EXPECT_EQ(out.scalar_type(), torch::kFloat);
  EXPECT_EQ(bf16_out.scalar_type(), torch::kFloat);
  for (const auto& p : model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);  // master weights
  // bf16 keeps 8 bits of mantissa: close to float32, and not equal to it.
  const double difference = (bf16_out - fp32_out).abs().max().item<double>();
  EXPECT_GT(difference, 0.0);
  EXPECT_LT(difference, 0.05 * fp32_out.abs().max().item<double>());
}

TEST(MixedPrecision, Fp16ForwardSeesHalfValuesAndTheMasterWeightsComeBack) {
  const auto cfg = mlp_config();
  auto model = build_model(cfg, 3);
  const auto masters = snapshot(*model);
  const MixedPrecision fp16(Precision::Fp16, nullptr);
  const auto x = batch_of(1).inputs / 3.0;  // not representable in fp16 as they are
  torch::Tensor out;
  std::vector<torch::Tensor> inputs;
  {
    const auto half = fp16.half_weights(model->parameters());
    for (const auto& p : model->parameters()) EXPECT_TRUE(torch::equal(p, round_through_half(p)));
    EXPECT_FALSE(same(snapshot(*model), masters));
    linear_outputs(*model, fp16, x, &out, &inputs);
  }
  EXPECT_TRUE(same(snapshot(*model), masters));
  ASSERT_EQ(inputs.size(), 2u);
  for (const auto& in : inputs) EXPECT_TRUE(torch::equal(in, round_through_half(in)));
  EXPECT_TRUE(torch::equal(out, round_through_half(out)));
  EXPECT_FALSE(torch::equal(x, round_through_half(x)));
}

TEST(MixedPrecision, GradientsAreUnscaledAndTheScaleGrowsAfterCleanSteps) {
  MixedPrecision fp16(Precision::Fp16, nullptr, optim::LossScalerOptions{1024.0, 2.0, 0.5, 2});
  auto w = torch::zeros({2}, torch::requires_grad());
  for (int step = 0; step < 2; ++step) {
    w.mutable_grad() = torch::tensor({0.5F, -0.25F}) * static_cast<float>(fp16.loss_scale());
    ASSERT_TRUE(fp16.finish_gradients({w}, nullptr));
    EXPECT_TRUE(torch::equal(w.grad(), torch::tensor({0.5F, -0.25F})));
  }
  EXPECT_EQ(fp16.loss_scale(), 2048.0);
  // A gradient whose scaled value passes 65504 overflows in fp16: skipped, backed off.
  w.mutable_grad() = torch::tensor({40.0F, 1.0F}) * static_cast<float>(fp16.loss_scale());
  EXPECT_FALSE(fp16.finish_gradients({w}, nullptr));
  EXPECT_TRUE(fp16.last_skipped());
  EXPECT_EQ(fp16.loss_scale(), 1024.0);
}

TEST(MixedPrecision, LbfgsIsRefusedWithFp16) {
  auto cfg = mlp_config();
  cfg.optim.name = "lbfgs";
  cfg.optim.momentum = 0.0;
  try {
    make_strategy(cfg, build_model(cfg, 1), nullptr, Precision::Fp16);
    FAIL() << "lbfgs with fp16 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.precision: fp16"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(make_strategy(cfg, build_model(cfg, 1), nullptr, Precision::Bf16));
}

TEST(MixedPrecisionStep, Fp16StepIsFp32StepUpToHalfRoundingAndOverflowSkips) {
  const auto cfg = mlp_config();
  auto fp32_model = build_model(cfg, 5);
  auto fp16_model = build_model(cfg, 5);
  auto fp32 = make_strategy(cfg, fp32_model, nullptr, Precision::Fp32);
  auto fp16 = make_strategy(cfg, fp16_model, nullptr, Precision::Fp16);
  const auto initial = snapshot(*fp16_model);
  const auto r32 = fp32->train_step(batch_of(11));
  const auto r16 = fp16->train_step(batch_of(11));
  EXPECT_FALSE(r16.skipped);
  EXPECT_EQ(r16.loss_scale, 65536.0);
  EXPECT_EQ(r32.loss_scale, 0.0);
  EXPECT_NEAR(r16.loss, r32.loss, 1e-2);
  // Unscaled: the update is fp32's up to fp16 rounding, not 65536 times larger.
  std::vector<torch::Tensor> step32, step16;
  const auto after32 = snapshot(*fp32_model), after16 = snapshot(*fp16_model);
  for (std::size_t i = 0; i < initial.size(); ++i) {
    step32.push_back(after32[i] - initial[i]);
    step16.push_back(after16[i] - initial[i]);
  }
  const double difference = testing::max_relative_difference(step16, step32);
  EXPECT_GT(difference, 0.0);
  EXPECT_LT(difference, 0.02);

  const auto before = snapshot(*fp16_model);
  const auto overflow = fp16->train_step(batch_of(12, 8, kOverflowingInputs));
  EXPECT_TRUE(overflow.skipped);
  EXPECT_EQ(overflow.loss_scale, 32768.0);
  EXPECT_TRUE(same(snapshot(*fp16_model), before));  // skipped: not even momentum moved them
  const auto next = fp16->train_step(batch_of(13));
  EXPECT_FALSE(next.skipped);
  EXPECT_EQ(next.loss_scale, 32768.0);
  EXPECT_FALSE(same(snapshot(*fp16_model), before));
}

// Every fp16 strategy that runs without a communicator (one process: local, decentralized's nodes).
TEST(MixedPrecisionStep, ResumeContinuesWithTheSavedScale) {
  std::vector<std::string> strategies;
  for (const auto& info : registered_strategies()) {
    if (info.capabilities.fp16 && !info.needs_communicator) strategies.push_back(info.name);
  }
  ASSERT_FALSE(strategies.empty());
  for (const auto& strategy : strategies) {
    auto cfg = strategy == "decentralized" ? testing::decentralized_config("dsgd", "complete", 1)
                                           : mlp_config(strategy);
    auto first = make_strategy(cfg, build_model(cfg, 2), nullptr, Precision::Fp16);
    first->train_step(batch_of(1));
    EXPECT_TRUE(first->train_step(batch_of(2, 8, kOverflowingInputs)).skipped) << strategy;
    first->train_step(batch_of(3));
    io::Checkpoint checkpoint;
    first->save(checkpoint);
    ASSERT_TRUE(checkpoint.contains("strategy/loss_scaler/scale")) << strategy;
    EXPECT_EQ(checkpoint.tensor("strategy/loss_scaler/clean_steps").item<std::int64_t>(), 1);

    auto resumed = make_strategy(cfg, build_model(cfg, 2), nullptr, Precision::Fp16);
    resumed->load(checkpoint);
    const auto r = resumed->train_step(batch_of(4));
    EXPECT_FALSE(r.skipped);
    EXPECT_EQ(r.loss_scale, 32768.0) << strategy;
    auto fresh = make_strategy(cfg, build_model(cfg, 2), nullptr, Precision::Fp16);
    EXPECT_EQ(fresh->train_step(batch_of(4)).loss_scale, 65536.0) << strategy;
    // A run saved without a scaler (fp32) resumes in fp16 from the initial scale.
    io::Checkpoint plain;
    make_strategy(cfg, build_model(cfg, 2), nullptr, Precision::Fp32)->save(plain);
    EXPECT_FALSE(plain.contains("strategy/loss_scaler/scale"));
    auto from_fp32 = make_strategy(cfg, build_model(cfg, 2), nullptr, Precision::Fp16);
    from_fp32->load(plain);
    EXPECT_EQ(from_fp32->train_step(batch_of(4)).loss_scale, 65536.0) << strategy;
  }
}

// Every strategy that declares fp16, on 2 ranks: rank 1's batch overflows, rank 0's does not. Every
// rank must skip (its parameters untouched, the scale halved), then step again on clean batches.
class OneRanksOverflow : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> fp16_strategies() {
  std::vector<std::string> names;
  for (const auto& info : registered_strategies()) {
    if (info.capabilities.fp16) names.push_back(info.name);
  }
  return names;
}

TEST_P(OneRanksOverflow, SkipsTheStepOnEveryRank) {
  const auto strategy = GetParam();
  // Decentralized: local_sgd, whose rounds are dsgd's and choco's without the mixing, so that a
  // skipped round leaves the nodes exactly as they were; its nodes' gradients are never reduced.
  auto cfg = strategy == "decentralized" ? testing::decentralized_config("local_sgd", "complete", 2)
                                         : mlp_config(strategy);
  if (strategy == "decentralized") {
    cfg.parallel.options.get<DecentralizedOptions>("decentralized").local_steps = 100;
  }
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < 2; ++r) models.push_back(build_model(cfg, 7));
  std::vector<int> skipped(2, -1), stepped_after(2, -1);
  std::vector<double> scales(2, 0.0);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    auto s = make_strategy(cfg, models[rank], comm, Precision::Fp16);
    auto* decentralized = dynamic_cast<DecentralizedStrategy*>(s.get());
    const auto parameters = [&] {
      return decentralized ? std::vector<torch::Tensor>{decentralized->node_parameters(rank)}
                           : snapshot(*models[rank]);
    };
    s->train_step(batch_of(100 + rank));
    const auto before = parameters();
    const auto r = s->train_step(batch_of(200 + rank, 8, rank == 1 ? kOverflowingInputs : 1.0));
    skipped[rank] = r.skipped && same(parameters(), before) ? 1 : 0;
    scales[rank] = r.loss_scale;
    const auto next = s->train_step(batch_of(300 + rank));
    stepped_after[rank] = !next.skipped && !same(parameters(), before) ? 1 : 0;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(skipped[r], 1) << strategy << " rank " << r << " did not skip with its parameters untouched";
    EXPECT_EQ(scales[r], 32768.0) << strategy << " rank " << r;
    EXPECT_EQ(stepped_after[r], 1) << strategy << " rank " << r << " did not step after the skip";
  }
}

INSTANTIATE_TEST_SUITE_P(Strategies, OneRanksOverflow, ::testing::ValuesIn(fp16_strategies()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The agreement is a collective of its own, not a side effect of averaged gradients: an fp16
// data_parallel step makes exactly the fp32 step's calls plus one all-reduce of one flag.
TEST(MixedPrecisionAgreement, DataParallelAgreesWithOneFlagPerStep) {
  const auto cfg = mlp_config("data_parallel");
  std::map<Precision, std::vector<dtrain::testing::LoggedCall>> calls;
  for (const auto precision : {Precision::Fp32, Precision::Fp16}) {
    std::vector<models::NetworkPtr> models;
    for (int r = 0; r < 2; ++r) models.push_back(build_model(cfg, 7));
    std::vector<std::vector<dtrain::testing::LoggedCall>> per_rank(2);
    testing::run_in_process_world(2, [&](comm::CommunicatorPtr comm) {
      const int rank = comm->rank();
      auto s = make_strategy(cfg, models[rank], comm, precision);
      const auto before = dynamic_cast<dtrain::testing::InProcessCommunicator&>(*comm).log().size();
      s->train_step(batch_of(100 + rank));
      const auto log = dynamic_cast<dtrain::testing::InProcessCommunicator&>(*comm).log();
      per_rank[rank].assign(log.begin() + static_cast<std::ptrdiff_t>(before), log.end());
    });
    EXPECT_EQ(per_rank[0], per_rank[1]);
    calls[precision] = per_rank[0];
  }
  auto expected = calls[Precision::Fp32];
  expected.push_back({"allreduce", 1});
  EXPECT_EQ(calls[Precision::Fp16], expected);
}

// The step decided on the device (Note [A loss scaler on the device]): two ranks that overflow on
// different steps each hold, after every step, the state of one GradScaler state machine fed
// "some rank overflowed": the flag all-reduced over the real communicator, nothing read between.
TEST(MixedPrecisionAgreement, DeviceDecisionsOfTwoRanksFollowOneStateMachine) {
  const optim::LossScalerOptions options{256.0, 2.0, 0.5, 2};
  constexpr int kSteps = 40;
  const auto overflows = [](int rank, int step) { return (step + rank) % (3 + 2 * rank) == 0; };
  std::vector<std::vector<double>> scales(2), skipped(2);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    MixedPrecision fp16(Precision::Fp16, comm, options);
    auto w = torch::zeros({3}, torch::requires_grad());
    for (int step = 0; step < kSteps; ++step) {
      auto grad = torch::full({3}, 0.25F) * static_cast<float>(fp16.loss_scale());
      if (overflows(rank, step)) grad[1] = std::numeric_limits<float>::infinity();
      w.mutable_grad() = grad;
      fp16.finish_gradients_on_device({w}, nullptr);
      scales[rank].push_back(fp16.loss_scale());
      skipped[rank].push_back(fp16.last_skipped());
    }
  });
  double scale = options.init_scale;
  std::int64_t clean = 0;
  int skips = 0;
  for (int step = 0; step < kSteps; ++step) {
    const bool any = overflows(0, step) || overflows(1, step);
    if (any) {
      scale *= options.backoff_factor;
      clean = 0;
      ++skips;
    } else if (++clean >= options.growth_interval) {
      scale *= options.growth_factor;
      clean = 0;
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(scales[r][step], scale) << "rank " << r << " step " << step;
      ASSERT_EQ(skipped[r][step], any ? 1.0 : 0.0) << "rank " << r << " step " << step;
    }
  }
  EXPECT_GT(skips, 10);  // both ranks' overflows, and steps where only the other rank overflowed
}

// Every decentralized algorithm, each of whose rounds steps its nodes its own way: rank 1's nodes
// overflow in round 1, every rank skips alike (CADMM once per primal iteration), and round 2
// steps again with a finite loss.
class DecentralizedOverflow : public ::testing::TestWithParam<std::string> {};

TEST_P(DecentralizedOverflow, EveryRankSkipsAndTrainingGoesOn) {
  auto cfg = testing::decentralized_config(GetParam(), "complete", 2);
  if (GetParam() == "cadmm") {
    auto& options = cfg.parallel.options.get<DecentralizedOptions>("decentralized");
    options.primal_iterations = 2;
    options.rho_init = 0.5;
  }
  std::vector<models::NetworkPtr> models;
  for (int r = 0; r < 2; ++r) models.push_back(build_model(cfg, 9));
  std::vector<double> scales(2, 0.0), next_scales(2, 0.0);
  std::vector<int> skipped(2, -1), finite_after(2, -1);
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int rank = comm->rank();
    auto s = make_strategy(cfg, models[rank], comm, Precision::Fp16);
    auto& decentralized = dynamic_cast<DecentralizedStrategy&>(*s);
    const int per = s->batches_per_step();
    auto batch = [&](std::int64_t round, double scale) {
      auto b = testing::rank_batch(decentralized.layout(), rank, round, per, 8);
      return data::Batch{b.inputs * scale, b.targets};
    };
    s->train_step(batch(0, 1.0));
    const auto r = s->train_step(batch(1, rank == 1 ? kOverflowingInputs : 1.0));
    skipped[rank] = r.skipped ? 1 : 0;
    scales[rank] = r.loss_scale;
    const auto next = s->train_step(batch(2, 1.0));
    finite_after[rank] = !next.skipped && std::isfinite(next.loss) ? 1 : 0;
    next_scales[rank] = next.loss_scale;
  });
  const double expected = GetParam() == "cadmm" ? 16384.0 : 32768.0;  // cadmm: two primal iterations
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(skipped[r], 1) << GetParam() << " rank " << r;
    EXPECT_EQ(scales[r], expected) << GetParam() << " rank " << r;
    EXPECT_EQ(finite_after[r], 1) << GetParam() << " rank " << r;
    EXPECT_EQ(next_scales[r], expected) << GetParam() << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DecentralizedOverflow,
                         ::testing::Values("dsgd", "cadmm", "dsgt", "choco", "push_sum", "local_sgd",
                                           "centralized"));

// bf16 really trains: lenet5 fitting one batch falls as far as in float32, by different numbers.
TEST(MixedPrecisionTraining, Bf16Lenet5LossFallsAsInFloat32) {
  config::RunConfig cfg = mlp_config();
  cfg.model.name = "lenet5";
  cfg.optim.name = "adam";
  cfg.optim.momentum = 0.0;
  cfg.optim.lr = 0.005;
  const auto batch = batch_of(21, 32);
  std::map<Precision, std::pair<double, double>> first_last;
  std::map<Precision, std::vector<torch::Tensor>> weights;
  for (const auto precision : {Precision::Fp32, Precision::Bf16}) {
    auto model = build_model(cfg, 4);
    auto s = make_strategy(cfg, model, nullptr, precision);
    double first = 0.0, last = 0.0;
    for (int step = 0; step < 30; ++step) {
      last = s->train_step(batch).loss;
      if (step == 0) first = last;
    }
    first_last[precision] = {first, last};
    weights[precision] = snapshot(*model);
  }
  const auto [f32_first, f32_last] = first_last[Precision::Fp32];
  const auto [b16_first, b16_last] = first_last[Precision::Bf16];
  EXPECT_NEAR(b16_first, f32_first, 0.02);
  EXPECT_LT(f32_last, 0.5 * f32_first);
  EXPECT_LT(b16_last, 0.5 * b16_first);
  EXPECT_NEAR(b16_last, f32_last, 0.1 * f32_first);
  EXPECT_FALSE(same(weights[Precision::Bf16], weights[Precision::Fp32]));
}

// A model of one's own whose Linear layer feeds a torch::nn::LayerNorm (float32 weights, bfloat16
// input under autocast: Note [Normalisation under CPU autocast]) trains in bf16 under every
// strategy that computes in it, its loss falling as in float32.
models::NetworkPtr layer_norm_net() {
  torch::manual_seed(8);
  torch::nn::Sequential layers(torch::nn::Flatten(), torch::nn::Linear(784, 32),
                               torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})), torch::nn::GELU(),
                               torch::nn::Linear(32, 10));
  return models::network("layernormnet", layers);
}

class Bf16LayerNorm : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(Bf16LayerNorm, UserModuleTrainsAsInFloat32) {
  const auto [strategy, ranks] = GetParam();
  auto cfg = mlp_config(strategy);
  cfg.optim.name = "adam";
  cfg.optim.momentum = 0.0;
  cfg.optim.lr = 0.005;
  const auto batch = batch_of(22, 8 * ranks);
  std::map<Precision, std::vector<double>> losses;
  for (const auto precision : {Precision::Fp32, Precision::Bf16}) {
    std::vector<models::NetworkPtr> nets;
    for (int r = 0; r < ranks; ++r) nets.push_back(layer_norm_net());
    ASSERT_NO_THROW(check_precision_runs(precision, *nets.front(), models::InputSpec::image(1, 28, 28, 10)));
    std::vector<std::vector<double>> per_rank(ranks);
    dtrain::testing::run_world(
        ranks,
        [&](comm::CommunicatorPtr comm) {
          const int r = comm->rank();
          auto s = make_strategy(cfg, nets[r], comm, precision);
          const auto rows = torch::indexing::Slice(r * 8, (r + 1) * 8);
          for (int step = 0; step < 15; ++step)
            per_rank[r].push_back(
                s->train_step({batch.inputs.index({rows}), batch.targets.index({rows})}).loss);
        },
        dtrain::testing::WorldOptions::on("in-process"));
    losses[precision] = per_rank[0];
  }
  const auto& f32 = losses[Precision::Fp32];
  const auto& b16 = losses[Precision::Bf16];
  EXPECT_NEAR(b16.front(), f32.front(), 0.05);
  EXPECT_LT(b16.back(), 0.5 * b16.front());
  EXPECT_NEAR(b16.back(), f32.back(), 0.1 * f32.front());
  EXPECT_NE(b16, f32);  // computed in bfloat16, not float32
}

INSTANTIATE_TEST_SUITE_P(Strategies, Bf16LayerNorm,
                         ::testing::Values(std::make_pair(std::string("local"), 1),
                                           std::make_pair(std::string("data_parallel"), 2),
                                           std::make_pair(std::string("zero"), 2),
                                           std::make_pair(std::string("dad"), 2)),
                         [](const auto& info) { return info.param.first; });

// An op with no bfloat16 kernel (a module of one's own standing for LibTorch 1.13's mish or
// fractional max-pooling) is refused before training, naming the stage; the probe leaves the
// buffers and the generators as they were.
struct NoBf16Impl : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x) {
    TORCH_CHECK(x.scalar_type() != torch::kBFloat16, "\"my_op\" has no kernel for 'BFloat16'");
    return x;
  }
};
TORCH_MODULE(NoBf16);

TEST(CheckPrecisionRuns, RefusesAStageThatCannotComputeInBf16ByName) {
  torch::manual_seed(3);
  torch::nn::Sequential layers(torch::nn::Flatten(), torch::nn::Linear(784, 16), torch::nn::BatchNorm1d(16),
                               torch::nn::Dropout(0.5), NoBf16(), torch::nn::Linear(16, 10));
  auto net = models::network("mine", layers);
  torch::manual_seed(5);
  const auto next = torch::rand({3});
  torch::manual_seed(5);
  try {
    check_precision_runs(Precision::Bf16, *net, models::InputSpec::image(1, 28, 28, 10));
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("train.precision: bf16: stage layers.4 (", 0), 0U) << what;
    EXPECT_NE(
        what.find("NoBf16Impl) of model mine cannot compute in bf16 on cpu: \"my_op\" has no kernel for "
                  "'BFloat16'; use train.precision: fp32 for this model"),
        std::string::npos)
        << what;
  }
  // BatchNorm's statistics and the generator (dropout drew from it) are as before the probe.
  EXPECT_TRUE(torch::equal(net->named_buffers()["layers.2.running_mean"], torch::zeros({16})));
  EXPECT_EQ(net->named_buffers()["layers.2.num_batches_tracked"].item<std::int64_t>(), 0);
  EXPECT_TRUE(torch::equal(torch::rand({3}), next));
  EXPECT_NO_THROW(check_precision_runs(Precision::Fp32, *net, models::InputSpec::image(1, 28, 28, 10)));
  EXPECT_NO_THROW(check_precision_runs(Precision::Fp16, *net, models::InputSpec::image(1, 28, 28, 10)));
}

}  // namespace
}  // namespace dtrain::parallel
