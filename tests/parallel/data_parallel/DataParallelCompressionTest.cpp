// Every gradient compression of DataParallel on the gloo backend, ranks as threads (the checks of
// CompressionChecks.h, which mpi runs under mpirun), and what PowerSGD adds: plain rounds first,
// its bytes counted like every collective, its state across a resume at another world size, and
// the data_parallel strategy's options, checkpoint keys and notes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/comm/gloo/GlooWireBytes.h"
#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"
#include "parallel/data_parallel/CompressionChecks.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using namespace testing;

TEST(DataParallelCompression, EveryOptionGivesTheMeanGradientOnGloo) {
  for (const auto& c : compression_cases()) {
    for (int n : {2, 3}) {
      dtrain::testing::run_world(
          n, [&](comm::CommunicatorPtr comm) { expect_compression_gives_the_mean(comm, c); });
    }
  }
}

TEST(PowerSgd, ErrorFeedbackMakesTheSumOfUpdatesConvergeToTheSumOfGradients) {
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) { expect_error_feedback_converges(comm); });
}

// Rounds 0 and 1 all-reduce plainly (exact mean, the whole gradient on the wire); from round 2 a
// round sends the biases with P (16 + 10 rows at rank 1) and then Q (784 + 16 columns): 852
// floats instead of 12,730, each all-reduce counted with the bytes Gloo's ring sends for it.
TEST(PowerSgd, PlainRoundsComeFirstAndACompressedRoundSendsPAndQ) {
  constexpr int n = 2;
  const std::uint64_t plain = 784 * kCheckHidden + kCheckHidden + kCheckHidden * 10 + 10;
  const std::uint64_t first = 16 + 10 + 16 + 10, second = 784 + 16;
  for (auto wire : {GradCompression::None, GradCompression::Fp16}) {
    const std::uint64_t element = wire == GradCompression::None ? 4 : 2;
    dtrain::testing::run_world(n, [&](comm::CommunicatorPtr comm) {
      const int r = comm->rank();
      auto model = check_model(3);
      DataParallelOptions options;
      options.compression = GradCompression::PowerSgd;
      options.powersgd.start_round = 2;
      options.powersgd.wire = wire;
      DataParallel dp(model.module, comm, options);
      const auto summary = dp.compression_summary();
      EXPECT_EQ(summary.compressed_tensors, 2);
      EXPECT_EQ(summary.plain_tensors, 2);
      EXPECT_EQ(summary.elements, static_cast<std::int64_t>(plain));
      EXPECT_EQ(summary.sent_elements, static_cast<std::int64_t>(first + second));
      for (int round = 0; round < 4; ++round) {
        for (auto& p : model.module->parameters()) p.mutable_grad().zero_();
        auto [x, y] = check_batch(r, round);
        const auto before = comm->stats();
        cross_entropy(model.forward(x), y).backward();
        dp.finish();
        const auto sent = comm::difference(comm->stats(), before).ops.at("allreduce");
        const auto where = "rank " + std::to_string(r) + " round " + std::to_string(round);
        if (round < 2) {
          EXPECT_EQ(sent.calls, 1u) << where;
          EXPECT_EQ(sent.bytes, element * plain) << where;
          EXPECT_EQ(sent.wire_bytes, comm::gloo_ring_allreduce_bytes(r, n, element * plain, element))
              << where;
          std::vector<torch::Tensor> grads;
          for (const auto& p : model.module->parameters()) grads.push_back(p.grad().clone());
          EXPECT_LE(max_relative_difference(grads, reference_mean_gradient(n, round)),
                    element == 4 ? 1e-6 : 2e-3)
              << where;
        } else {
          EXPECT_EQ(sent.calls, 2u) << where;
          EXPECT_EQ(sent.bytes, element * (first + second)) << where;
          EXPECT_EQ(sent.wire_bytes, comm::gloo_ring_allreduce_bytes(r, n, element * first, element) +
                                         comm::gloo_ring_allreduce_bytes(r, n, element * second, element))
              << where;
        }
      }
    });
  }
}

// 24 x 16 weight (compressed at rank 1) and a bias, whose gradients are set directly.
struct Linearish {
  std::shared_ptr<torch::nn::Module> module = std::make_shared<torch::nn::Module>();
  torch::Tensor weight = module->register_parameter("weight", torch::zeros({24, 16}));
  torch::Tensor bias = module->register_parameter("bias", torch::zeros({16}));

  // Runs one round with gradient g (and g's column sums for the bias); returns the update.
  torch::Tensor round(DataParallel& dp, const torch::Tensor& g) {
    weight.mutable_grad().zero_();
    bias.mutable_grad().zero_();
    ((weight * g).sum() + (bias * g.sum(0)).sum()).backward();
    dp.finish();
    return weight.grad().clone();
  }
};

torch::Tensor rank_gradient(int rank, int round) {
  auto base = at::randn({24, 16}, at::make_generator<at::CPUGeneratorImpl>(7), at::kFloat);
  return base +
         at::randn({24, 16}, at::make_generator<at::CPUGeneratorImpl>(100 * round + rank + 1), at::kFloat);
}

// With a gradient that stays the same, warm start makes the rounds one power iteration: the
// rank-1 update converges to the best rank-1 approximation s1 u1 v1^T (the error shrinks by
// (s2 / s1)^2 = 1/4 a round here). A fresh random Q every round stays one iteration away from it.
TEST(PowerSgd, WarmStartConvergesToTheBestRankOneApproximation) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto u = std::get<0>(at::linalg_qr(at::randn({24, 16}, generator, at::kFloat)));
  const auto v = std::get<0>(at::linalg_qr(at::randn({16, 16}, generator, at::kFloat)));
  auto s = torch::ones({16});
  s[0] = 10;
  s[1] = 5;
  const auto g = u.mm(torch::diag(s)).mm(v.t());
  const auto best = 10 * u.narrow(1, 0, 1).mm(v.narrow(1, 0, 1).t());
  for (bool warm_start : {true, false}) {
    DataParallelOptions options;
    options.compression = GradCompression::PowerSgd;
    options.powersgd.start_round = 0;
    options.powersgd.error_feedback = false;
    options.powersgd.warm_start = warm_start;
    dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
      Linearish m;
      DataParallel dp(m.module, comm, options);
      torch::Tensor update;
      for (int round = 0; round < 10; ++round) update = m.round(dp, g);
      const double error = ((update - best).norm() / best.norm()).item<double>();
      if (warm_start) {
        EXPECT_LT(error, 1e-4) << "rank " << comm->rank();
      } else {
        EXPECT_GT(error, 1e-2) << "rank " << comm->rank();
      }
    });
  }
}

// Note [PowerSGD state in checkpoints]: 2 ranks run 8 rounds; the state saved after round 4 lets 2
// ranks, and 1 rank fed the 2 ranks' mean gradient, compute rounds 5 to 7's updates again.
TEST(PowerSgd, ResumedStateGivesTheSameUpdatesAtAnyWorldSize) {
  DataParallelOptions options;
  options.compression = GradCompression::PowerSgd;
  options.powersgd.start_round = 2;
  options.powersgd.seed = 11;
  std::vector<torch::Tensor> expected(8);
  std::map<std::string, torch::Tensor> saved;
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    Linearish m;
    DataParallel dp(m.module, comm, options);
    for (int round = 0; round < 8; ++round) {
      const auto update = m.round(dp, rank_gradient(comm->rank(), round));
      if (comm->rank() == 0) expected[round] = update;
      if (round == 4) {
        auto state = dp.compression_state();
        if (comm->rank() == 0) saved = state;
      }
    }
  });
  ASSERT_EQ(saved.count("round"), 1u);
  EXPECT_EQ(saved.at("round").item<std::int64_t>(), 5);
  ASSERT_EQ(saved.count("q/weight"), 1u);
  ASSERT_EQ(saved.count("error/weight"), 1u);
  EXPECT_EQ(saved.count("error/bias"), 0u) << "the bias goes plainly";
  for (int world : {2, 1}) {
    dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
      Linearish m;
      DataParallel dp(m.module, comm, options);
      dp.load_compression_state(saved);
      for (int round = 5; round < 8; ++round) {
        const auto g = world == 2 ? rank_gradient(comm->rank(), round)
                                  : (rank_gradient(0, round) + rank_gradient(1, round)) / 2;
        const auto update = m.round(dp, g);
        EXPECT_LE(max_relative_difference({update}, {expected[round]}), 1e-5)
            << "world " << world << " rank " << comm->rank() << " round " << round;
      }
    });
  }
}

config::RunConfig config_with(const std::vector<std::string>& overrides) {
  std::vector<std::string> all{"model.name=mlp", "model.hidden=[16]", "optim.name=sgd", "optim.lr=0.1",
                               "parallel.strategy=data_parallel"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_run_config("", "<compression test>", all);
}

TEST(DataParallelStrategyOptions, PowerSgdOptionsWithAnotherCompressionAreRefused) {
  const auto cfg =
      config_with({"parallel.data_parallel.compression=fp16", "parallel.data_parallel.powersgd_rank=4"});
  try {
    data_holders(cfg.parallel, 2);  // what `dtrain train --nproc 2` checks before starting workers
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "parallel.data_parallel.powersgd_rank: applies to compression powersgd, not fp16; set "
                 "parallel.data_parallel.compression: powersgd or leave powersgd_rank out");
  }
  EXPECT_EQ(data_holders(config_with({"parallel.data_parallel.compression=powersgd",
                                      "parallel.data_parallel.powersgd_wire=bf16"})
                             .parallel,
                         3),
            3);
  EXPECT_THROW(config_with({"parallel.data_parallel.powersgd_rank=0"}), config::ConfigError);
  EXPECT_THROW(config_with({"parallel.data_parallel.powersgd_wire=int8"}), config::ConfigError);
}

// L-BFGS evaluates its closure several times a step: error feedback would carry one evaluation's
// residue into the next, so the pair is refused when the strategy is built; without it, it builds.
TEST(DataParallelStrategyOptions, PowerSgdErrorFeedbackWithLbfgsIsRefused) {
  const auto refused = config_with({"parallel.data_parallel.compression=powersgd", "optim.name=lbfgs"});
  const auto allowed = config_with({"parallel.data_parallel.compression=powersgd", "optim.name=lbfgs",
                                    "parallel.data_parallel.powersgd_error_feedback=false"});
  dtrain::testing::run_world(1, [&](comm::CommunicatorPtr comm) {
    try {
      build_strategy(refused, build_model(refused, 1), comm);
      FAIL() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(
          std::string(e.what()).find("parallel.data_parallel.powersgd_error_feedback: true does not work "
                                     "with optim.name lbfgs"),
          std::string::npos)
          << e.what();
    }
    EXPECT_NE(build_strategy(allowed, build_model(allowed, 1), comm), nullptr);
  });
}

// The strategy as the trainer builds it: its checkpoint holds PowerSGD's state under
// strategy/data_parallel/powersgd/, and its notes say what is compressed.
TEST(DataParallelStrategyOptions, PowerSgdStateIsInTheStrategysCheckpoint) {
  const auto cfg =
      config_with({"parallel.data_parallel.compression=powersgd",
                   "parallel.data_parallel.powersgd_start_step=0", "parallel.data_parallel.powersgd_rank=2"});
  std::vector<models::NetworkPtr> models{build_model(cfg, 1), build_model(cfg, 2)};
  io::Checkpoint saved;
  std::map<std::string, std::string> notes;
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    auto strategy = build_strategy(cfg, models[comm->rank()], comm);
    torch::manual_seed(0);
    const auto x = torch::randn({4, 1, 28, 28}).add(comm->rank());
    strategy->train_step({x, torch::randint(0, 10, {4})});
    io::Checkpoint mine;
    strategy->save(mine);
    if (comm->rank() == 0) {
      saved = mine;
      notes = strategy->notes();
    }
  });
  EXPECT_EQ(saved.tensor("strategy/data_parallel/powersgd/round").item<std::int64_t>(), 1);
  bool has_error = false;
  for (const auto& [key, value] : saved.tensors())
    has_error |= key.rfind("strategy/data_parallel/powersgd/error/", 0) == 0;
  EXPECT_TRUE(has_error);
  ASSERT_EQ(notes.count("data_parallel/powersgd"), 1u);
  EXPECT_NE(notes.at("data_parallel/powersgd").find("compressed at rank 2"), std::string::npos)
      << notes.at("data_parallel/powersgd");
}

}  // namespace
}  // namespace dtrain::parallel
