// train.cuda_graph: each setting a graph cannot hold is refused by name, and on a GPU the replayed
// step trains as the eager one does (Note [Capturing the step in a CUDA graph]).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "dtrain/parallel/Registry.h"
#include "dtrain/train/CudaGraphStep.h"
#include "dtrain/train/Trainer.h"
#include "train/TrainTestUtil.h"

namespace dtrain::train {
namespace {

config::RunConfig graphed_config() {
  auto c = testing::small_trainer_config("graph");
  c.optim.name = "sgd";
  c.optim.momentum = 0.9;
  c.train.device = config::Device::Cuda;
  c.train.cuda_graph = true;
  return c;
}

std::string refusal(const config::RunConfig& c, int world_size = 1) {
  try {
    check_cuda_graph(c, world_size);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const config::RunConfig& c, const std::string& fragment, int world_size = 1) {
  const auto what = refusal(c, world_size);
  EXPECT_EQ(what.rfind("train.cuda_graph: true: ", 0), 0u) << what;
  EXPECT_NE(what.find(fragment), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

TEST(CudaGraph, EachSettingAGraphCannotHoldIsRefusedByName) {
  auto cpu = graphed_config();
  cpu.train.device = config::Device::Cpu;
  expect_refused(cpu, "set train.device: cuda (this run is on cpu)");

  auto data_parallel = graphed_config();
  data_parallel.parallel.strategy = "data_parallel";
  expect_refused(data_parallel, "only parallel.strategy: local's step is captured; data_parallel's");
  // Every strategy as its registration declares: refused by name unless its step can be captured.
  for (const auto& info : parallel::registered_strategies()) {
    auto c = graphed_config();
    c.parallel.strategy = info.name;
    if (info.capabilities.cuda_graph) {
      EXPECT_EQ(refusal(c).find("step is captured"), std::string::npos) << info.name << ": " << refusal(c);
    } else {
      expect_refused(c, "'s step is captured; " + info.name + "'s communication");
    }
  }

  auto lbfgs = graphed_config();
  lbfgs.optim.name = "lbfgs";
  expect_refused(lbfgs, "lbfgs evaluates the model again inside its step");

  auto per_tensor = graphed_config();
  per_tensor.optim.foreach = config::AutoBool::False;
  expect_refused(per_tensor, "optim.foreach: false");

  auto fp16 = graphed_config();
  fp16.train.precision = config::Precision::Fp16;
  expect_refused(fp16, "fp16 on several workers", /*world_size=*/2);

  auto off = graphed_config();
  off.train.cuda_graph = false;
  off.optim.name = "lbfgs";
  EXPECT_EQ(refusal(off), "");
}

TEST(CudaGraph, ThisBuildSaysWhetherItCanCapture) {
  const auto cfg = graphed_config();
  if (const auto why = cuda_graph_unavailable()) {
    expect_refused(cfg, *why);
    EXPECT_FALSE(torch::cuda::is_available() && why->find("without CUDA") != std::string::npos) << *why;
  } else {
    EXPECT_EQ(refusal(cfg), "");
    EXPECT_EQ(refusal(cfg, /*world_size=*/4), "");  // fp32: local workers each replay their own graph
  }
}

// On a GPU: 20 replayed steps (after the eager warm-up) land within 1e-5 of 20 eager steps, for
// sgd, adam and adamw, in fp32 and in fp16 (whose skip the fused step decides on the device), with
// a learning-rate schedule that changes the rate every step.
TEST(CudaGraph, ReplayedStepsEqualEagerStepsOnAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  if (const auto why = cuda_graph_unavailable()) GTEST_SKIP() << *why;
  for (const std::string optimizer : {"sgd", "adam", "adamw"})
    for (const std::string precision : {"fp32", "fp16"}) {
      SCOPED_TRACE(optimizer + " " + precision);
      auto cfg = graphed_config();
      cfg.optim.name = optimizer;
      if (optimizer != "sgd") cfg.optim.lr = 1e-3;
      cfg.train.precision = config::kPrecisionNames.parse(precision, "train.precision");
      cfg.train.max_steps = 20 + CudaGraphStep::kWarmupSteps;
      cfg.optim.scheduler.name = "cosine";
      auto eager_cfg = cfg;
      eager_cfg.train.cuda_graph = false;
      Trainer graphed(cfg, nullptr);
      Trainer eager(eager_cfg, nullptr);
      const auto g = graphed.fit();
      const auto e = eager.fit();
      EXPECT_NEAR(g.final_eval.loss, e.final_eval.loss, 1e-5) << precision;
      const auto a = graphed.strategy().model_state();
      for (const auto& [name, value] : eager.strategy().model_state()) {
        EXPECT_TRUE(torch::allclose(a.at(name).cpu(), value.cpu(), 1e-5, 1e-5)) << precision << " " << name;
      }
    }
}

}  // namespace
}  // namespace dtrain::train
