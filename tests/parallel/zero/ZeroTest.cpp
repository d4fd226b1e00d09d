// The zero strategy against data_parallel, ranks as threads over gloo: every stage ends where
// data_parallel ends (Adam, sgd with momentum, adamw, gradient accumulation), on an mlp whose
// units do not divide evenly by 2, 3 or 4 ranks; a stage-3 checkpoint from 4 ranks resumes at 2
// ranks and as data_parallel with the same state and continues as if never interrupted; the bytes
// memory_footprint() reports are ZeRO's accounting with the padding; during a step, stages 2 and 3
// hold whole gradients (and stage 3 gathered parameters) of at most two units at once, counted by
// the CPU allocator; the layout note's units among the model's stages; and what zero refuses.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/parallel/zero/ZeroStrategy.h"
#include "parallel/ParallelTestUtil.h"
#include "parallel/zero/ZeroTestUtil.h"
#include "support/CountingAllocator.h"
#include "support/ThreadWorld.h"

namespace dtrain::parallel {
namespace {

using namespace zero_test;

// Adam divides by sqrt(v): in float32 the summation order of a near-zero gradient entry (a ring
// all-reduce against a reduce-scatter) can move an update by up to lr, so Adam runs in float64,
// which isolates the mathematics (as StrategyEquivalenceTest does). sgd runs in float32.
constexpr int kSteps = 20;

TEST(Zero, EveryStageEqualsDataParallelWithAdamAt2To4Ranks) {
  const auto data = data_of(kSteps, torch::kDouble);
  for (int ranks : {2, 3, 4}) {
    const auto expected = train(config_of("data_parallel", "adam"), ranks, data, 0, kSteps, torch::kDouble);
    for (int stage : {1, 2, 3}) {
      const auto end = train(zero_config(stage, "adam"), ranks, data, 0, kSteps, torch::kDouble);
      EXPECT_LE(max_abs_difference(end, expected), 1e-6) << "stage " << stage << " at " << ranks << " ranks";
    }
  }
}

TEST(Zero, SgdWithMomentumAdamwAccumulationAndNoPrefetchEqualDataParallel) {
  const int ranks = 3;
  const auto sgd_data = data_of(kSteps, torch::kFloat);
  const auto sgd_expected =
      train(config_of("data_parallel", "sgd"), ranks, sgd_data, 0, kSteps, torch::kFloat);
  const auto data = data_of(kSteps, torch::kDouble);
  const auto adamw_expected =
      train(config_of("data_parallel", "adamw"), ranks, data, 0, kSteps, torch::kDouble);
  const auto accumulated_expected =
      train(config_of("data_parallel", "adam", {"parallel.accumulation_steps=2"}), ranks, data, 0, kSteps,
            torch::kDouble);
  for (int stage : {1, 2, 3}) {
    EXPECT_LE(max_abs_difference(train(zero_config(stage, "sgd"), ranks, sgd_data, 0, kSteps, torch::kFloat),
                                 sgd_expected),
              1e-6)
        << "sgd, stage " << stage;
    EXPECT_LE(max_abs_difference(train(zero_config(stage, "adamw"), ranks, data, 0, kSteps, torch::kDouble),
                                 adamw_expected),
              1e-6)
        << "adamw, stage " << stage;
    EXPECT_LE(max_abs_difference(train(zero_config(stage, "adam", {"parallel.accumulation_steps=2"}), ranks,
                                       data, 0, kSteps, torch::kDouble),
                                 accumulated_expected),
              1e-6)
        << "accumulation 2, stage " << stage;
  }
  const auto expected = train(config_of("data_parallel", "adam"), ranks, data, 0, kSteps, torch::kDouble);
  EXPECT_LE(max_abs_difference(train(zero_config(3, "adam", {"parallel.zero.prefetch=false"}), ranks, data, 0,
                                     kSteps, torch::kDouble),
                               expected),
            1e-6);
}

// train.precision as data_parallel honours it: bf16 autocast, and fp16's rounded weights (stage 3
// rounds what it gathers), rounded gradients and loss scale, with an overflowing step skipped on
// every rank. sgd in float32; 16-bit rounding can turn the last-bit differences of another
// summation order into one 16-bit step, hence the looser bound (the updates themselves are ~1e-2).
TEST(Zero, MixedPrecisionStepsAsDataParallelDoes) {
  const int ranks = 2, steps = 4;
  for (const auto precision : {optim::Precision::Bf16, optim::Precision::Fp16}) {
    auto data = data_of(steps, torch::kFloat);
    if (precision == optim::Precision::Fp16) data.inputs[2].mul_(1e6);  // overflows: skipped everywhere
    std::vector<double> expected_losses;
    const auto expected = train(config_of("data_parallel", "sgd"), ranks, data, 0, steps, torch::kFloat,
                                nullptr, nullptr, precision, &expected_losses);
    for (int stage : {1, 2, 3}) {
      std::vector<double> losses;
      const auto end = train(zero_config(stage, "sgd"), ranks, data, 0, steps, torch::kFloat, nullptr,
                             nullptr, precision, &losses);
      const auto name =
          fmt::format("{} stage {}", precision == optim::Precision::Bf16 ? "bf16" : "fp16", stage);
      EXPECT_LE(max_abs_difference(end, expected), 1e-4) << name;
      ASSERT_EQ(losses.size(), expected_losses.size());
      for (std::size_t i = 0; i < losses.size(); ++i) {
        if (std::isnan(expected_losses[i])) {
          EXPECT_TRUE(std::isnan(losses[i])) << name << " step " << i;
        } else {
          EXPECT_NEAR(losses[i], expected_losses[i], 1e-3) << name << " step " << i;
        }
      }
    }
  }
}

// Rank 0's checkpoint's tensors by name, and which of them are optimizer state.
TEST(Zero, Stage3CheckpointFrom4RanksResumesAt2RanksAndAsDataParallel) {
  const auto data = data_of(kSteps, torch::kDouble);
  const auto zero3 = zero_config(3, "adam");
  const auto dp = config_of("data_parallel", "adam");
  const int half = kSteps / 2;
  const auto uninterrupted = train(zero3, 4, data, 0, kSteps, torch::kDouble);

  io::Checkpoint saved;
  train(zero3, 4, data, 0, half, torch::kDouble, nullptr, &saved);
  ASSERT_TRUE(saved.contains("optimizer/layers.1.weight/exp_avg")) << "whole tensors by parameter name";
  EXPECT_EQ(saved.tensor("optimizer/layers.1.weight/exp_avg").sizes(), (std::vector<std::int64_t>{31, 784}));
  EXPECT_EQ(saved.tensor("optimizer/layers.3.bias/step").item<std::int64_t>(), half);

  for (const auto& [name, cfg] : std::vector<std::pair<std::string, config::RunConfig>>{
           {"zero stage 3 at 2 ranks", zero3},
           {"data_parallel at 2 ranks", dp},
           {"zero stage 1 at 3 ranks", zero_config(1, "adam")}}) {
    const int ranks = name.find("3 ranks") != std::string::npos ? 3 : 2;
    // Loaded and saved again at once: the same parameters and optimizer state, bit for bit.
    io::Checkpoint again;
    train(cfg, ranks, data, half, half, torch::kDouble, &saved, &again);
    for (const auto& [key, value] : saved.tensors()) {
      ASSERT_TRUE(again.contains(key)) << name << ": " << key;
      EXPECT_TRUE(torch::equal(again.tensor(key), value)) << name << ": " << key;
    }
    EXPECT_EQ(again.tensors().size(), saved.tensors().size()) << name;
    // And the rest of the run ends where the uninterrupted one does.
    const auto end = train(cfg, ranks, data, half, kSteps, torch::kDouble, &saved);
    EXPECT_LE(max_abs_difference(end, uninterrupted), 1e-6) << name;
  }
}

// mlp [31] at 3 ranks: units 24,335 -> 3 x 8,112 = 24,336 and 320 -> 3 x 107 = 321, so P = 24,657
// padded elements and S = 8,219 per rank (Ψ = 24,655).
TEST(Zero, MemoryFootprintIsZerosAccountingWithPadding) {
  constexpr std::uint64_t P = 24336 + 321, S = 8112 + 107;
  const auto data = data_of(1, torch::kFloat);
  for (int stage : {1, 2, 3}) {
    for (const auto& optimizer_and_state :
         std::vector<std::pair<std::string, std::uint64_t>>{{"adam", 8}, {"sgd", 4}}) {
      // Named copies, not a structured binding: C++17 lambdas cannot capture those (clang refuses).
      const std::string optimizer = optimizer_and_state.first;
      const std::uint64_t state_bytes = optimizer_and_state.second;
      const auto cfg = zero_config(stage, optimizer);
      std::vector<models::NetworkPtr> models;
      for (int r = 0; r < 3; ++r) models.push_back(testing::build_model(cfg, 7, torch::kFloat));
      dtrain::testing::run_world(3, [&](comm::CommunicatorPtr comm) {
        const int r = comm->rank();
        auto strategy = testing::build_strategy(cfg, models[r], comm);
        const auto& zero = dynamic_cast<const ZeroStrategy&>(*strategy);
        const auto layouts = zero.layouts();
        ASSERT_EQ(layouts.size(), 2u);
        EXPECT_EQ(layouts[0].numel, 24335);
        EXPECT_EQ(layouts[0].padded, 24336);
        EXPECT_EQ(layouts[1].shard, 107);
        EXPECT_EQ(strategy->memory_footprint().optimizer_state, 0u);
        const auto planned = strategy->planned_footprint();
        strategy->train_step(rank_slice(data, 0, r, 3));
        const auto f = strategy->memory_footprint();
        const std::uint64_t parameters = stage == 3 ? 4 * S : 4 * P;
        const std::uint64_t gradients = stage == 1 ? 4 * P : 4 * S;
        // Planned before the step: the same, with stages 2 and 3's whole gradients while a
        // backward runs (both units here: kGradientBuffers is 2).
        EXPECT_EQ(planned.parameters, parameters) << "stage " << stage;
        EXPECT_EQ(planned.gradients, gradients + (stage == 1 ? 0 : 4 * P)) << "stage " << stage;
        // What stays between steps is what the step leaves.
        EXPECT_EQ(planned.held(), parameters + gradients + state_bytes * S) << "stage " << stage;
        EXPECT_EQ(planned.optimizer_state, state_bytes * S) << "stage " << stage << " " << optimizer;
        EXPECT_EQ(f.parameters, parameters) << "stage " << stage << " " << optimizer;
        EXPECT_EQ(f.gradients, gradients) << "stage " << stage << " " << optimizer;
        EXPECT_EQ(f.optimizer_state, state_bytes * S) << "stage " << stage << " " << optimizer;
        if (stage == 3) {
          // The whole parameters were freed after backward; evaluation gathers them and frees them again.
          for (const auto& p : models[r]->parameters()) EXPECT_EQ(p.storage().nbytes(), 0u);
          strategy->begin_evaluation();
          const auto outputs = strategy->eval_forward(0, data.inputs[0]);
          EXPECT_EQ(outputs.size(0), kGlobalBatch);
          EXPECT_EQ(strategy->memory_footprint().parameters, 4 * P + 4 * S);
          strategy->end_evaluation();
          EXPECT_EQ(strategy->memory_footprint().parameters, 4 * S);
        }
      });
    }
  }
}

// What a rank allocates during one Adam step beyond what it held before it, counted per rank by
// LibTorch's CPU allocator (tests/support/CountingAllocator.h): an mlp of ten 256-wide layers on
// 4x4 inputs, eleven units, nine of them U = 65,792 elements (a 256x256 weight, W = 65,536, and its
// bias), so the whole gradient (Ψ = 599,050) is nine units. Note [Gradient buffers]: stage 2 holds
// the flat gradients of at most two units and their reduce-scatters' outputs (U/N each), plus
// autograd's gradient of the parameter being added in (W, alive until the post-hooks have run);
// stage 3 also the gathered parameters of the unit in use and the prefetched one (2U). A quarter
// unit is allowed for the rest (the activations of 3 samples, about 30 KB). Keeping every unit's
// gradient until the step (stage 1's way), copying each unit's gradients into a fresh flat buffer,
// or letting three reductions be in flight goes over the bound.
TEST(Zero, StepHoldsTheWholeGradientsOfAtMostTwoUnits) {
  constexpr std::int64_t kUnit = 256 * 256 + 256, kWeight = 256 * 256, kBytes = 4;
  const auto cfg_of = [](int stage) {
    return config::parse_run_config(
        "", "<zero test>",
        {"parallel.strategy=zero", "parallel.zero.stage=" + std::to_string(stage), "optim.name=adam",
         "model.name=mlp", "model.hidden=[256,256,256,256,256,256,256,256,256,256]"});
  };
  torch::manual_seed(99);
  const auto inputs = torch::randn({2, 3, 1, 4, 4});
  const auto targets = torch::randint(0, 10, {2, 3});
  for (int stage : {2, 3}) {
    const auto cfg = cfg_of(stage);
    std::vector<models::NetworkPtr> models;
    for (int r = 0; r < 2; ++r) {
      torch::manual_seed(7);
      models.push_back(models::create_model(cfg.model, models::InputSpec::image(1, 4, 4, 10)));
    }
    std::vector<dtrain::testing::AllocationCounter> counters(2);
    std::vector<std::int64_t> transient(2), kept(2), pooled(2);
    std::int64_t psi = 0;
    for (const auto& p : models[0]->parameters()) psi += p.numel();
    ASSERT_EQ(psi, 599050);
    {
      dtrain::testing::CountingAllocatorGuard counting;
      dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
        const int r = comm->rank();
        auto strategy = testing::build_strategy(cfg, models[r], comm);
        dtrain::testing::CountingAllocator::counter_of_this_thread() = &counters[r];
        strategy->train_step({inputs[r], targets[r]});  // Adam's state and the pooled buffers come into being
        counters[r].reset_peak();
        // The pooled buffers are the step's (Note [Reused buffers]): counted as if taken during it.
        const auto* zero = dynamic_cast<const parallel::ZeroStrategy*>(strategy.get());
        ASSERT_NE(zero, nullptr);
        pooled[r] = static_cast<std::int64_t>(zero->buffer_bytes());
        const auto before = counters[r].live.load() - pooled[r];
        strategy->train_step({inputs[r], targets[r]});
        transient[r] = counters[r].peak.load() - before;
        kept[r] = counters[r].live.load() - before - pooled[r];
        // Lent again, not grown: two units' gradients, and two shard copies for the all-gathers after
        // the step (stage 2) or two gathered units (stage 3). Reduced straight into the shards'
        // gradients (one micro-batch), no reduce-scatter output is pooled.
        EXPECT_EQ(static_cast<std::int64_t>(zero->buffer_bytes()), pooled[r]);
        const std::int64_t slots = 2 * kUnit + (stage == 2 ? 2 * (kUnit / 2) : 2 * kUnit);
        EXPECT_EQ(pooled[r], kBytes * slots) << "stage " << stage;
        dtrain::testing::CountingAllocator::counter_of_this_thread() = nullptr;
      });
    }
    const std::int64_t gradients = 2 * (kUnit + (kUnit + 1) / 2) + kWeight;
    const std::int64_t buffers = stage == 2 ? gradients : gradients + 2 * kUnit;
    for (int r = 0; r < 2; ++r) {
      EXPECT_GT(transient[r], kBytes * kWeight) << "stage " << stage << ": the counter saw no gradient";
      EXPECT_LE(transient[r], kBytes * (buffers + kUnit / 4))
          << "stage " << stage << " rank " << r << ": " << transient[r] << " bytes beyond what it held, "
          << kBytes * psi << " the whole gradient, " << kBytes * kUnit << " one unit";
      EXPECT_LE(kept[r], 0) << "stage " << stage << ": the step left " << kept[r] << " bytes behind";
    }
  }
}

TEST(Zero, BufferPoolLendsItsKeptSlotsAgainAndNeverGrowsPastThem) {
  zero::BufferPool pool(/*keep=*/2, /*slot_bytes=*/400);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  auto a = pool.take(100, f32);  // a whole slot
  auto b = pool.take(7, torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_EQ(pool.kept_bytes(), 800u);
  EXPECT_EQ(a.numel(), 100);
  EXPECT_EQ(b.scalar_type(), torch::kDouble);
  // Both slots lent: memory of its own, and the pool stays at two.
  auto c = pool.take(10, f32);
  EXPECT_EQ(pool.kept_bytes(), 800u);
  EXPECT_NE(c.data_ptr(), a.data_ptr());
  EXPECT_NE(c.data_ptr(), b.data_ptr());
  pool.give(c);  // not the pool's: nothing to give back
  // Given back, a slot is lent again from its start, for any dtype that fits.
  void* const first = a.data_ptr();
  pool.give(a);
  auto d = pool.take(3, torch::TensorOptions().dtype(torch::kLong));
  EXPECT_EQ(d.data_ptr(), first);
  // Larger than a slot: memory of its own, even with a slot free.
  pool.give(b);
  auto e = pool.take(101, f32);
  EXPECT_NE(e.data_ptr(), b.data_ptr());
  EXPECT_EQ(e.numel(), 101);
  EXPECT_EQ(pool.kept_bytes(), 800u);
}

TEST(Zero, RefusesWhatItCannotHonourNamingTheKey) {
  const auto lbfgs = config_of("zero", "lbfgs", {"optim.lbfgs_max_iter=2"});
  const auto model = testing::build_model(lbfgs, 7);
  dtrain::testing::run_world(1, [&](comm::CommunicatorPtr comm) {
    try {
      testing::build_strategy(lbfgs, model, comm);
      ADD_FAILURE() << "lbfgs was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("optim.name: lbfgs"), std::string::npos) << e.what();
    }
  });
  try {
    const auto cfg = zero_config(2, "adam", {"parallel.zero.prefetch=false"});
    data_holders(cfg.parallel, 2);
    ADD_FAILURE() << "prefetch with stage 2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero.prefetch"), std::string::npos) << e.what();
  }
  EXPECT_ANY_THROW(zero_config(4, "adam"));
  const auto cfg = zero_config(3, "adam");
  auto frozen = testing::build_model(cfg, 7);
  frozen->parameters()[0].set_requires_grad(false);
  dtrain::testing::run_world(1, [&](comm::CommunicatorPtr comm) {
    try {
      testing::build_strategy(cfg, frozen, comm);
      ADD_FAILURE() << "a frozen parameter was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("model.freeze"), std::string::npos) << e.what();
    }
  });
}

// The layout note counts units and stages as the model's summary line does ("mlp: ... in 4 stages"):
// mlp [31] is Flatten, Linear, ReLU, Linear, so 2 units (the stages with parameters) of 4 stages.
TEST(Zero, TheLayoutNoteCountsUnitsAmongTheModelsStages) {
  const auto cfg = zero_config(2, "adam");
  const auto model = testing::build_model(cfg, 7);
  ASSERT_EQ(model->stages().size(), 4u);
  std::vector<models::NetworkPtr> models{model, testing::build_model(cfg, 7), testing::build_model(cfg, 7)};
  dtrain::testing::run_world(3, [&](comm::CommunicatorPtr comm) {
    auto strategy = testing::build_strategy(cfg, models[comm->rank()], comm);
    EXPECT_EQ(strategy->metrics().at("zero/units"), 2.0);
    EXPECT_EQ(strategy->notes().at("zero/layout"),
              "stage 2: 24655 parameters in 2 units (one per model stage with parameters, of the model's 4 "
              "stages), padded to 24657 (2 padding elements); 8219 elements per rank's shard");
  });
}

// Stage 3's whole-model bytes on the wire per step: each unit gathered for forward and again for
// backward and reduce-scattered once, against data_parallel's all-reduce; bytes_sent is the
// strategy's own count.
TEST(Zero, StepCountsItsOwnCommunication) {
  const auto data = data_of(1, torch::kFloat);
  const auto cfg = zero_config(3, "adam", {"parallel.zero.prefetch=false"});
  std::vector<models::NetworkPtr> models{testing::build_model(cfg, 7), testing::build_model(cfg, 8)};
  dtrain::testing::run_world(2, [&](comm::CommunicatorPtr comm) {
    const int r = comm->rank();
    auto strategy = testing::build_strategy(cfg, models[r], comm);
    const auto before = strategy->comm_stats();
    const auto result = strategy->train_step(rank_slice(data, 0, r, 2));
    const auto traffic = comm::difference(strategy->comm_stats(), before);
    EXPECT_EQ(result.bytes_sent, traffic.total().wire_bytes);
    EXPECT_GT(result.bytes_sent, 0u);
    // Two units: forward gathers both, backward gathers the first again (the last stays), both
    // are reduce-scattered; then the loss's all-reduce.
    EXPECT_EQ(traffic.ops.at("allgather").calls, 3u);
    EXPECT_EQ(traffic.ops.at("reduce_scatter").calls, 2u);
    EXPECT_EQ(traffic.ops.at("allreduce").calls, 1u);
    // Each unit's reduce-scatter was launched from backward's hooks, not after it.
    const auto metrics = strategy->metrics();
    EXPECT_EQ(metrics.at("zero/units"), 2.0);
    EXPECT_EQ(metrics.at("zero/overlapped"), 2.0);
  });
}

}  // namespace
}  // namespace dtrain::parallel
