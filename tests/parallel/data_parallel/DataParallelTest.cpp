// DataParallel's contract: rank 0's state broadcast at construction, the module check, buckets
// launched in one order on every rank, unused parameters, bucket sizes, no_sync accumulation.
#include "dtrain/parallel/data_parallel/DataParallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dtrain/parallel/ModuleSync.h"
#include "parallel/ParallelTestUtil.h"

namespace dtrain::parallel {
namespace {

using namespace testing;

// (batch, 8) -> (batch, 4) with BatchNorm buffers of two dtypes (float statistics, int64 count)
// and, optionally, a branch that only some ranks use.
struct BranchyImpl : torch::nn::Module {
  BranchyImpl()
      : inp(register_module("inp", torch::nn::Linear(8, 16))),
        norm(register_module("norm", torch::nn::BatchNorm1d(16))),
        side(register_module("side", torch::nn::Linear(16, 4))),
        out(register_module("out", torch::nn::Linear(16, 4))),
        spare(register_module("spare", torch::nn::Linear(4, 4))) {}
  torch::Tensor forward(const torch::Tensor& x, bool use_side) {
    auto h = torch::relu(norm(inp(x)));
    auto y = out(h);
    return use_side ? y + side(h) : y;
  }
  torch::nn::Linear inp;
  torch::nn::BatchNorm1d norm;
  torch::nn::Linear side, out;
  torch::nn::Linear spare;  // registered last, never used: lands in the first bucket
};
TORCH_MODULE(Branchy);

TEST(DataParallel, BroadcastMakesDifferentlyInitialisedRanksEqual) {
  constexpr int n = 3;
  std::vector<Branchy> models;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(100 + r);
    models.emplace_back();
    torch::NoGradGuard no_grad;
    models.back()->norm->running_mean.fill_(r);
    models.back()->norm->num_batches_tracked.fill_(10 * r);
  }
  std::vector<torch::Tensor> rank0;
  for (const auto& t : module_state(*models[0])) rank0.push_back(t.clone());
  ASSERT_FALSE(torch::equal(models[1]->inp->weight, models[0]->inp->weight));

  auto comms = in_process_group(n);
  run_threads(n, [&](int r) { DataParallel dp(models[r].ptr(), comms[r]); });
  for (int r = 1; r < n; ++r) {
    const auto state = module_state(*models[r]);
    ASSERT_EQ(state.size(), rank0.size());
    for (std::size_t i = 0; i < state.size(); ++i)
      EXPECT_TRUE(torch::equal(state[i], rank0[i])) << "rank " << r << " tensor " << i;
  }
  // Coalesced: one broadcast per dtype (float parameters and buffers, int64 count), not one per tensor.
  int broadcasts = 0;
  for (const auto& call : std::dynamic_pointer_cast<InProcessCommunicator>(comms[0])->log())
    broadcasts += call.op == "broadcast";
  EXPECT_EQ(broadcasts, 2);
}

TEST(DataParallel, ShapeMismatchNamesTheParameterAndBothShapes) {
  std::vector<TestModel> models{make_model("mlp", 1, /*mlp_hidden=*/32),
                                make_model("mlp", 1, /*mlp_hidden=*/16)};
  auto comms = in_process_group(2);
  std::vector<std::string> messages(2);
  run_threads(2, [&](int r) {
    try {
      DataParallel dp(models[r].module, comms[r]);
    } catch (const std::invalid_argument& e) {
      messages[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(
        messages[r].find("parameter 0 'fc1.weight': rank 0 has [32, 784] Float, rank 1 has [16, 784] Float"),
        std::string::npos)
        << "rank " << r << ": " << messages[r];
  }
}

TEST(DataParallel, MissingParameterIsNamed) {
  torch::manual_seed(0);
  auto full = std::make_shared<torch::nn::Module>();
  full->register_parameter("a", torch::zeros({2}));
  full->register_parameter("b", torch::zeros({3}));
  auto partial = std::make_shared<torch::nn::Module>();
  partial->register_parameter("a", torch::zeros({2}));
  std::vector<std::shared_ptr<torch::nn::Module>> models{full, partial};
  auto comms = in_process_group(2);
  std::vector<std::string> messages(2);
  run_threads(2, [&](int r) {
    try {
      DataParallel dp(models[r], comms[r]);
    } catch (const std::invalid_argument& e) {
      messages[r] = e.what();
    }
  });
  EXPECT_NE(messages[1].find(
                "rank 1 has 1 parameters and buffers, rank 0 has 2; rank 1 lacks parameter 1 'b' [3] Float"),
            std::string::npos)
      << messages[1];
}

// Every rank issues the same all-reduces, bucket by bucket, in bucket order, even when one rank's
// gradients complete in a different order (here: rank 1 skips the `side` branch, so its first
// buckets can only launch in finish(), after later buckets are already complete).
TEST(DataParallel, BucketsLaunchInTheSameOrderOnEveryRank) {
  constexpr int n = 2;
  std::vector<Branchy> models;
  for (int r = 0; r < n; ++r) models.emplace_back();
  auto comms = in_process_group(n);
  DataParallelOptions options;
  options.bucket_mb = 100.0 * sizeof(float) / (1 << 20);  // 100 floats: one or two tensors per bucket
  std::vector<std::vector<std::vector<std::string>>> buckets(n);
  std::vector<int> overlapped(n);
  torch::manual_seed(5);
  const auto x = torch::randn({4, 8});
  run_threads(n, [&](int r) {
    DataParallel dp(models[r].ptr(), comms[r], options);
    buckets[r] = dp.bucket_parameter_names();
    for (int step = 0; step < 3; ++step) {
      models[r]->zero_grad();
      models[r]->forward(x, /*use_side=*/r == 0).sum().backward();
      dp.finish();
    }
    overlapped[r] = dp.last_sync_timing().buckets_launched_in_backward;
  });
  ASSERT_EQ(buckets[0], buckets[1]);
  ASSERT_GE(buckets[0].size(), 4u);
  EXPECT_EQ(buckets[0].front().front(), "spare.bias");  // reverse registration order
  EXPECT_EQ(buckets[0].back().back(), "inp.weight");
  // Rank 0 uses every parameter but `spare` (bucket 0), so nothing may launch before finish().
  EXPECT_EQ(overlapped[0], 0);

  const auto log0 = std::dynamic_pointer_cast<InProcessCommunicator>(comms[0])->log();
  const auto log1 = std::dynamic_pointer_cast<InProcessCommunicator>(comms[1])->log();
  EXPECT_EQ(log0, log1);
  std::vector<std::int64_t> allreduce_sizes;
  for (const auto& call : log0) {
    if (call.op == "allreduce") allreduce_sizes.push_back(call.numel);
  }
  ASSERT_EQ(allreduce_sizes.size(), 3 * buckets[0].size());
  auto named = models[0]->named_parameters();
  for (std::size_t b = 0; b < buckets[0].size(); ++b) {
    std::int64_t numel = 0;
    for (const auto& name : buckets[0][b]) numel += named[name].numel();
    EXPECT_EQ(allreduce_sizes[b], numel) << "bucket " << b;
  }
}

TEST(DataParallel, UnusedParametersDoNotDeadlockAndRanksStayEqual) {
  constexpr int n = 2;
  std::vector<Branchy> models;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(40 + r);
    models.emplace_back();
  }
  auto comms = in_process_group(n);
  torch::manual_seed(6);
  const auto x = torch::randn({n, 4, 8});
  run_threads(n, [&](int r) {
    DataParallel dp(models[r].ptr(), comms[r]);
    torch::optim::SGD opt(models[r]->parameters(), 0.1);
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      // Rank 1 never uses `side`; nobody uses `spare`.
      models[r]->forward(x[r], /*use_side=*/r == 0).pow(2).mean().backward();
      dp.finish();
      EXPECT_TRUE(models[r]->spare->weight.grad().defined());
      EXPECT_EQ(models[r]->spare->weight.grad().abs().sum().item<float>(), 0.0f);
      EXPECT_GT(models[r]->side->weight.grad().abs().sum().item<float>(), 0.0f) << "rank " << r;
      opt.step();
    }
  });
  EXPECT_EQ(max_relative_difference(snapshot(*models[1]), snapshot(*models[0])), 0.0);
}

TEST(DataParallel, SmallBucketsGiveTheSameResultAsOneBucket) {
  constexpr int n = 2;
  torch::manual_seed(8);
  const auto x = torch::randn({4, n * 4, 1, 28, 28});
  const auto y = torch::randint(0, 10, {4, n * 4});
  auto train = [&](double bucket_mb, std::size_t* bucket_count) {
    std::vector<TestModel> models{make_model("lenet5", 9), make_model("lenet5", 10)};
    auto comms = in_process_group(n);
    run_threads(n, [&](int r) {
      DataParallelOptions options;
      options.bucket_mb = bucket_mb;
      DataParallel dp(models[r].module, comms[r], options);
      if (r == 0) *bucket_count = dp.bucket_parameter_names().size();
      const int buckets = static_cast<int>(dp.bucket_parameter_names().size());
      torch::optim::SGD opt(models[r].module->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
      for (int s = 0; s < 4; ++s) {
        opt.zero_grad();
        const auto rows = torch::indexing::Slice(r * 4, (r + 1) * 4);
        cross_entropy(models[r].forward(x[s].index({rows})), y[s].index({rows})).backward();
        dp.finish();
        // Every parameter is used, so every bucket but the last starts its all-reduce during
        // backward; the last is reduced in finish() (Note [The last bucket is reduced in finish()]).
        EXPECT_EQ(dp.last_sync_timing().buckets_launched_in_backward, buckets - 1);
        opt.step();
      }
    });
    return snapshot(*models[0].module);
  };
  std::size_t many = 0;
  std::size_t one = 0;
  const auto small = train(0.004, &many);  // ~1000 floats per bucket
  const auto large = train(25.0, &one);
  EXPECT_EQ(one, 1u);
  EXPECT_GE(many, 6u);
  EXPECT_LE(max_relative_difference(small, large), 1e-6);
}

// The loop docs/cpp-api.md shows, with accumulation written by hand: k-1 backwards under no_sync(), the
// last one synchronised; the result equals one backward over the whole global batch.
TEST(DataParallel, NoSyncAccumulationEqualsOneBigBatch) {
  constexpr int n = 2;
  constexpr int k = 3;
  torch::manual_seed(11);
  const auto x = torch::randn({n * k * 2, 1, 28, 28});
  const auto y = torch::randint(0, 10, {n * k * 2});

  auto reference = make_model("mlp", 12);
  cross_entropy(reference.forward(x), y).backward();
  std::vector<torch::Tensor> expected;
  for (const auto& p : reference.module->parameters()) expected.push_back(p.grad().clone());

  std::vector<TestModel> models{make_model("mlp", 12), make_model("mlp", 12)};
  auto comms = in_process_group(n);
  std::vector<int> allreduces_after_no_sync(n);
  run_threads(n, [&](int r) {
    DataParallel dp(models[r].module, comms[r]);
    const auto mine = x.chunk(n)[r].chunk(k);
    const auto labels = y.chunk(n)[r].chunk(k);
    {
      auto guard = dp.no_sync();
      EXPECT_FALSE(dp.sync());
      for (int i = 0; i < k - 1; ++i) (cross_entropy(models[r].forward(mine[i]), labels[i]) / k).backward();
      dp.finish();  // a no-op without sync
    }
    EXPECT_TRUE(dp.sync());
    allreduces_after_no_sync[r] = static_cast<int>(comms[r]->stats().ops["allreduce"].calls);
    (cross_entropy(models[r].forward(mine[k - 1]), labels[k - 1]) / k).backward();
    dp.finish();
  });
  EXPECT_EQ(allreduces_after_no_sync[0], 0);
  for (int r = 0; r < n; ++r) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : models[r].module->parameters()) grads.push_back(p.grad());
    EXPECT_LE(max_relative_difference(grads, expected), 1e-5) << "rank " << r;
  }
}

TEST(DataParallel, SecondBackwardBeforeFinishIsRejected) {
  auto m = make_model("mlp", 1);
  DataParallel dp(m.module, in_process_group(1)[0]);
  const auto x = torch::randn({2, 1, 28, 28});
  m.forward(x).sum().backward();
  try {
    m.forward(x).sum().backward();
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("second gradient before finish()"), std::string::npos) << e.what();
  }
}

TEST(DataParallel, GradientsAreViewsIntoTheBucketsAndSurviveSetToNone) {
  auto m = make_model("mlp", 1);
  DataParallel dp(m.module, in_process_group(1)[0]);
  const auto x = torch::randn({2, 1, 28, 28});
  auto w = m.module->named_parameters()["fc1.weight"];  // a handle: the dict is a temporary
  const void* slot = w.grad().data_ptr();
  m.forward(x).sum().backward();
  dp.finish();
  EXPECT_EQ(w.grad().data_ptr(), slot);
  const auto first = w.grad().clone();

  w.mutable_grad() = torch::Tensor();  // what zero_grad(set_to_none=true) does in LibTorch 2.x
  for (auto& p : m.module->parameters()) p.mutable_grad() = torch::Tensor();
  m.forward(x).sum().backward();
  dp.finish();
  EXPECT_EQ(w.grad().data_ptr(), slot);
  EXPECT_TRUE(torch::allclose(w.grad(), first));
}

TEST(DataParallel, CompressedAllReduceStaysCloseToFullPrecision) {
  constexpr int n = 2;
  torch::manual_seed(13);
  const auto x = torch::randn({n * 4, 1, 28, 28});
  const auto y = torch::randint(0, 10, {n * 4});
  auto grads_with = [&](GradCompression compression) {
    std::vector<TestModel> models{make_model("mlp", 14), make_model("mlp", 14)};
    auto comms = in_process_group(n);
    run_threads(n, [&](int r) {
      DataParallelOptions options;
      options.compression = compression;
      DataParallel dp(models[r].module, comms[r], options);
      cross_entropy(models[r].forward(x.chunk(n)[r]), y.chunk(n)[r]).backward();
      dp.finish();
    });
    std::vector<torch::Tensor> grads;
    for (const auto& p : models[0].module->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  const auto full = grads_with(GradCompression::None);
  EXPECT_LE(max_relative_difference(grads_with(GradCompression::Fp16), full), 2e-3);
  EXPECT_LE(max_relative_difference(grads_with(GradCompression::Bf16), full), 2e-2);
  EXPECT_EQ(parse_grad_compression("fp16"), GradCompression::Fp16);
  EXPECT_THROW(parse_grad_compression("int8"), std::invalid_argument);
}

TEST(DataParallel, CarriedValuesComeBackAsTheMeanOverRanksWithoutChangingGradients) {
  constexpr int n = 3;
  torch::manual_seed(17);
  const auto x = torch::randn({n * 4, 1, 28, 28});
  const auto y = torch::randint(0, 10, {n * 4});
  for (auto compression : {GradCompression::None, GradCompression::Fp16}) {
    for (double bucket_mb : {25.0, 0.01}) {
      auto grads_of = [&](bool carry) {
        std::vector<TestModel> models{make_model("mlp", 21), make_model("mlp", 21), make_model("mlp", 21)};
        std::vector<torch::Tensor> carried(n);
        auto comms = in_process_group(n);
        run_threads(n, [&](int r) {
          DataParallelOptions options;
          options.compression = compression;
          options.bucket_mb = bucket_mb;
          DataParallel dp(models[r].module, comms[r], options);
          for (int step = 0; step < 2; ++step) {
            // Rank r carries (r + 1, 10 (r + 1), step); the mean is (2, 20, step).
            if (carry) dp.carry_values(torch::tensor({r + 1.0, 10.0 * (r + 1), 1.0 * step}));
            cross_entropy(models[r].forward(x.chunk(n)[r]), y.chunk(n)[r]).backward();
            dp.finish();
            carried[r] = dp.carried_values();
          }
          EXPECT_THROW(dp.carry_values(torch::zeros({DataParallel::kMaxCarriedValues + 1})),
                       std::invalid_argument);
        });
        for (int r = 0; carry && r < n; ++r) {
          EXPECT_TRUE(carried[r].defined() && torch::allclose(carried[r], torch::tensor({2.0f, 20.0f, 1.0f})))
              << "rank " << r << " bucket_mb " << bucket_mb << ": " << carried[r];
        }
        if (!carry) {
          EXPECT_FALSE(carried[0].defined());
        }
        std::vector<torch::Tensor> grads;
        for (const auto& p : models[0].module->parameters()) grads.push_back(p.grad().clone());
        return grads;
      };
      EXPECT_EQ(max_relative_difference(grads_of(true), grads_of(false)), 0.0) << to_string(compression);
    }
  }
}

TEST(DataParallel, ValuesCarriedAfterBackwardStillRideAndSyncOffRejectsThem) {
  constexpr int n = 2;
  std::vector<TestModel> models{make_model("mlp", 1), make_model("mlp", 1)};
  auto comms = in_process_group(n);
  std::vector<torch::Tensor> carried(n);
  run_threads(n, [&](int r) {
    DataParallel dp(models[r].module, comms[r]);
    const auto x = torch::randn({4, 1, 28, 28});
    cross_entropy(models[r].forward(x), torch::randint(0, 10, {4})).backward();
    dp.carry_values(torch::full({1}, 10.0 * r));  // the last bucket waits for finish()
    dp.finish();
    carried[r] = dp.carried_values();
    dp.set_sync(false);
    EXPECT_THROW(dp.carry_values(torch::ones({1})), std::logic_error);
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(torch::allclose(carried[r], torch::full({1}, 5.0f))) << carried[r];
}

TEST(DataParallel, RejectsNonPositiveBucketSize) {
  auto m = make_model("mlp", 1);
  DataParallelOptions options;
  options.bucket_mb = 0;
  EXPECT_THROW(DataParallel(m.module, in_process_group(1)[0], options), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel
