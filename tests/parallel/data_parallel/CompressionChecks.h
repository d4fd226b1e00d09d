// What every gradient compression of DataParallel must do, written once as checks that one rank
// runs on its communicator, so that each backend's tests run them on their own worlds: gloo with
// ranks as threads (DataParallelCompressionTest.cpp), mpi with a process per rank under mpirun
// (tests/parallel/mpi/DataParallelMpiTest.cpp).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/parallel/data_parallel/DataParallel.h"
#include "parallel/ParallelTestUtil.h"

namespace dtrain::parallel::testing {

// mlp [16]: fc1 (16, 784), fc2 (10, 16) and their biases: 12,730 gradient elements.
constexpr int kCheckHidden = 16;
constexpr std::int64_t kCheckBatch = 4;  // per rank

// Rank r's batch of round `round`: the same on every backend and in the reference.
inline std::pair<torch::Tensor, torch::Tensor> check_batch(int rank, int round) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * round + rank);
  return {at::randn({kCheckBatch, 1, 28, 28}, generator, at::kFloat),
          at::randint(0, 10, {kCheckBatch}, generator, at::kLong)};
}

// The checks' mlp, its weights drawn from `seed` by a generator of its own: ranks run as threads
// would race for torch's default one.
inline TestModel check_model(std::uint64_t seed) {
  Mlp m(kCheckHidden);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.copy_(0.05 * at::randn(p.sizes(), generator, at::kFloat));
  return {m.ptr(), [m](const torch::Tensor& x) mutable { return m->forward(x); }};
}

// The mean over `ranks` ranks of their gradients in round `round`, computed here on the union
// batch (equal slices: the mean of the slices' mean losses is the union's mean loss).
inline std::vector<torch::Tensor> reference_mean_gradient(int ranks, int round) {
  auto model = check_model(3);
  std::vector<torch::Tensor> xs, ys;
  for (int r = 0; r < ranks; ++r) {
    auto [x, y] = check_batch(r, round);
    xs.push_back(x);
    ys.push_back(y);
  }
  cross_entropy(model.forward(torch::cat(xs)), torch::cat(ys)).backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : model.module->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

struct CompressionCase {
  std::string name;
  DataParallelOptions options;
  double tolerance;  // max relative difference from the exact mean, per tensor
  // Payload bytes of this rank's all-reduces in one round.
  std::uint64_t allreduce_bytes;
};

// Every compression option: none, fp16, bf16, and PowerSGD at full rank (exact but for rounding)
// with float32 and with fp16 on the wire.
inline std::vector<CompressionCase> compression_cases() {
  const std::int64_t plain = 784 * kCheckHidden + kCheckHidden + kCheckHidden * 10 + 10;
  std::vector<CompressionCase> cases;
  auto with = [](GradCompression compression) {
    DataParallelOptions options;
    options.compression = compression;
    return options;
  };
  cases.push_back({"none", with(GradCompression::None), 1e-6, 4 * plain});
  // Rounding to 16 bits: fp16 keeps 11 significant bits, bf16 8.
  cases.push_back({"fp16", with(GradCompression::Fp16), 2e-3, 2 * plain});
  cases.push_back({"bf16", with(GradCompression::Bf16), 2e-2, 2 * plain});
  auto full_rank = with(GradCompression::PowerSgd);
  full_rank.powersgd.rank = kCheckHidden;
  full_rank.powersgd.min_compression = 0;
  full_rank.powersgd.start_round = 0;
  // First message: the biases and P of fc1 (16 x 16) and fc2 (10 x 10); second: Q of fc1
  // (784 x 16) and fc2 (16 x 10).
  const std::int64_t powersgd = (kCheckHidden + 10 + 16 * 16 + 10 * 10) + (784 * 16 + 16 * 10);
  cases.push_back({"powersgd_full_rank", full_rank, 1e-5, 4 * powersgd});
  auto half = full_rank;
  half.powersgd.wire = GradCompression::Fp16;
  cases.push_back({"powersgd_full_rank_fp16_wire", half, 4e-3, 2 * powersgd});
  return cases;
}

// Three rounds of `c` on this rank: each round's gradients are within c.tolerance of the exact
// mean over ranks, and the round's all-reduces carry c.allreduce_bytes.
inline void expect_compression_gives_the_mean(const comm::CommunicatorPtr& comm, const CompressionCase& c) {
  const int r = comm->rank();
  const int n = comm->size();
  // Ranks start apart: the broadcast makes them rank 0's, which the reference starts from.
  auto model = check_model(r == 0 ? 3 : 50 + r);
  DataParallel dp(model.module, comm, c.options);
  for (int round = 0; round < 3; ++round) {
    for (auto& p : model.module->parameters()) p.mutable_grad().zero_();
    auto [x, y] = check_batch(r, round);
    const auto before = comm->stats();
    cross_entropy(model.forward(x), y).backward();
    dp.finish();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model.module->parameters()) grads.push_back(p.grad().clone());
    const auto where =
        c.name + " rank " + std::to_string(r) + "/" + std::to_string(n) + " round " + std::to_string(round);
    EXPECT_LE(max_relative_difference(grads, reference_mean_gradient(n, round)), c.tolerance) << where;
    if (n > 1) {
      const auto traffic = comm::difference(comm->stats(), before);
      EXPECT_EQ(traffic.ops.at("allreduce").bytes, c.allreduce_bytes) << where;
    }
  }
}

// PowerSGD at rank 1 on gradients G = A + noise (A a fixed full-rank 24 x 16 matrix): without
// error feedback the sum of the updates keeps missing what rank 1 cannot carry; with it the
// difference from the sum of the mean gradients stays bounded (it is the mean error memory), so
// relative to the growing sum it shrinks like 1/rounds (a float64 simulation of these numbers:
// 0.09 after 100 rounds, 0.025 after 400; without error feedback 0.89 and 0.90). The bias goes
// plainly and stays exact.
inline void expect_error_feedback_converges(const comm::CommunicatorPtr& comm) {
  const int r = comm->rank();
  const int n = comm->size();
  auto A = at::randn({24, 16}, at::make_generator<at::CPUGeneratorImpl>(7), at::kFloat);
  auto gradient = [&](int rank, int round) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(100 * round + rank + 1);
    return A + 0.5 * at::randn({24, 16}, generator, at::kFloat);
  };
  for (bool error_feedback : {true, false}) {
    auto module = std::make_shared<torch::nn::Module>();
    auto weight = module->register_parameter("weight", torch::zeros({24, 16}));
    auto bias = module->register_parameter("bias", torch::zeros({16}));
    DataParallelOptions options;
    options.compression = GradCompression::PowerSgd;
    options.powersgd.rank = 1;
    options.powersgd.start_round = 0;
    options.powersgd.error_feedback = error_feedback;
    DataParallel dp(module, comm, options);
    auto sent = torch::zeros({24, 16}), expected = torch::zeros({24, 16});
    auto sent_bias = torch::zeros({16}), expected_bias = torch::zeros({16});
    std::vector<double> relative;
    for (int round = 0; round < 400; ++round) {
      const auto g = gradient(r, round);
      const auto h = g.sum(0);  // the bias's gradient
      weight.mutable_grad().zero_();
      bias.mutable_grad().zero_();
      ((weight * g).sum() + (bias * h).sum()).backward();
      dp.finish();
      sent += weight.grad();
      sent_bias += bias.grad();
      for (int k = 0; k < n; ++k) {
        expected += gradient(k, round) / n;
        expected_bias += gradient(k, round).sum(0) / n;
      }
      relative.push_back(((sent - expected).norm() / expected.norm()).item<double>());
    }
    const auto where = std::string(error_feedback ? "with" : "without") + " error feedback, rank " +
                       std::to_string(r) + "/" + std::to_string(n);
    EXPECT_LE(((sent_bias - expected_bias).abs().max() / expected_bias.abs().max()).item<double>(), 1e-5)
        << where;
    if (error_feedback) {
      EXPECT_LT(relative[399], 0.05) << where;
      EXPECT_LT(relative[399], relative[99] / 3) << where << ": " << relative[99] << " after 100 rounds";
    } else {
      EXPECT_GT(relative[399], 0.5) << where;
    }
  }
}

}  // namespace dtrain::parallel::testing
