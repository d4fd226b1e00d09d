// train.device: where a rank trains. cpu everywhere; cuda where LibTorch sees a GPU, each rank on
// GPU local_rank modulo the GPUs, the model built on the CPU from the seed and then moved, batches
// moved per step, metrics counted on the CPU. The GPU tests run only where a GPU is (they skip
// here): each strategy on two ranks over gloo (GPU tensors staged through host memory, Note
// [Tensors on another device]), and tensor parallelism alone and on a 2-D mesh of four, against the
// same run on the CPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/train/Trainer.h"
#include "support/ThreadWorld.h"

namespace dtrain::train {
namespace {

config::RunConfig device_config(const std::string& device, const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all{"name=device",
                               "data.dataset=synthetic",
                               "data.synthetic_shape=[1,8,8]",
                               "data.synthetic_classes=4",
                               "data.synthetic_size=128",
                               "data.batch_size=16",
                               "data.test_subset_size=32",
                               "model.name=mlp",
                               "model.hidden=[16,16]",
                               "optim.name=adam",
                               "optim.lr=0.01",
                               "train.max_steps=6",
                               "train.seed=3",
                               "train.device=" + device};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::parse_run_config("{}", "<test>", all);
}

TEST(Device, TheCpuIsTheDefaultAndEveryRanksOwn) {
  EXPECT_TRUE(resolve_device(config::Device::Cpu, 0).is_cpu());
  EXPECT_TRUE(resolve_device(config::Device::Cpu, 7).is_cpu());
  Trainer trainer(device_config("cpu", {"parallel.strategy=local"}), nullptr);
  EXPECT_TRUE(trainer.device().is_cpu());
  for (const auto& p : trainer.strategy().model_state()) EXPECT_TRUE(p.second.device().is_cpu()) << p.first;
}

// Refused where the configuration is read: train.device holds cpu or cuda and nothing else.
TEST(Device, AnUnknownDeviceIsRefusedNamingTheChoices) {
  try {
    device_config("tpu");
    FAIL() << "tpu was accepted";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(e.message().find("train.device: expected one of cpu, cuda; found"), std::string::npos)
        << e.message();
  }
}

TEST(Device, CudaWithoutAGpuIsRefusedBeforeAnythingIsBuilt) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch sees a GPU";
  try {
    Trainer trainer(device_config("cuda"), nullptr);
    FAIL() << "cuda was accepted without a GPU";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.device: cuda: this LibTorch sees no CUDA device"),
              std::string::npos)
        << e.what();
  }
}

// cuDNN's autotuner and TF32 are a GPU's settings: asked for on the CPU they are refused by name
// (they would change nothing there); their defaults pass and leave nothing to state.
TEST(Device, GpuSettingsOnTheCpuAreRefusedByName) {
  config::TrainConfig train;
  EXPECT_NO_THROW(check_device_settings(train));
  EXPECT_TRUE(apply_device_settings(train, torch::Device(torch::kCPU)).empty());
  train.cudnn_benchmark = config::AutoBool::False;
  EXPECT_NO_THROW(check_device_settings(train));
  const std::vector<std::pair<std::string, std::string>> refused{{"cudnn_benchmark", "true"},
                                                                 {"float32_matmul_precision", "high"}};
  for (const auto& [key, value] : refused) {
    try {
      Trainer trainer(device_config("cpu", {"parallel.strategy=local", "train." + key + "=" + value}),
                      nullptr);
      FAIL() << key << "=" << value << " was accepted on the CPU";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("train." + key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("train.device: cuda"), std::string::npos) << e.what();
    }
  }
}

TEST(Device, RanksTakeTheGpuOfTheirLocalRankModuloTheGpus) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  for (int local = 0; local < 2 * gpus; ++local) {
    const auto device = resolve_device(config::Device::Cuda, local);
    EXPECT_TRUE(device.is_cuda());
    EXPECT_EQ(device.index(), local % gpus);
  }
}

// The final parameters of `strategy` trained on `device` over `world` ranks (gloo).
std::map<std::string, torch::Tensor> trained(const std::string& device,
                                             const std::vector<std::string>& overrides, int world) {
  std::map<std::string, torch::Tensor> out;
  const auto cfg = device_config(device, overrides);
  if (world == 1) {
    Trainer trainer(cfg, nullptr);
    trainer.fit();
    for (const auto& [name, t] : trainer.strategy().model_state()) out[name] = t.to(torch::kCPU);
    return out;
  }
  std::mutex mutex;
  dtrain::testing::run_world(world, [&](comm::CommunicatorPtr comm) {
    Trainer trainer(cfg, comm, comm->rank());
    EXPECT_EQ(trainer.device().type(), device == "cuda" ? torch::kCUDA : torch::kCPU);
    trainer.fit();
    const auto state = trainer.strategy().model_state();
    if (comm->rank() != 0) return;
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [name, t] : state) out[name] = t.to(torch::kCPU);
  });
  return out;
}

struct DeviceCase {
  std::string label;
  std::vector<std::string> overrides;
  int world;
  double tolerance = 1e-4;  // bf16: CPU and CUDA autocast cast different ops
};

void PrintTo(const DeviceCase& c, std::ostream* os) {
  *os << c.label;
}

class DeviceStrategies : public ::testing::TestWithParam<DeviceCase> {};

// A vit of one block over the 8x8 images' four 4x4 patches, two heads for tensor parallelism to split.
const char* const kSmallVit = "model={name: vit, dim: 16, heads: 2, depth: 1, patch: 4}";

TEST_P(DeviceStrategies, TrainOnTheGpuAsOnTheCpu) {
  const auto& c = GetParam();
  const auto cpu = trained("cpu", c.overrides, c.world);
  ASSERT_FALSE(cpu.empty());
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU (the CPU run above trained)";
  const auto gpu = trained("cuda", c.overrides, c.world);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (const auto& [name, t] : cpu) {
    ASSERT_TRUE(gpu.count(name)) << name;
    // Different kernels sum in different orders: equal to float32 rounding over six Adam steps.
    EXPECT_TRUE(torch::allclose(t, gpu.at(name), /*rtol=*/10 * c.tolerance, /*atol=*/c.tolerance))
        << c.label << " " << name << " differs by " << (t - gpu.at(name)).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, DeviceStrategies,
    ::testing::Values(
        DeviceCase{"local", {"parallel.strategy=local"}, 1},
        DeviceCase{"local_bf16", {"parallel.strategy=local", "train.precision=bf16"}, 1, 3e-2},
        DeviceCase{"data_parallel", {"parallel.strategy=data_parallel"}, 2},
        DeviceCase{"dad", {"parallel.strategy=dad"}, 2},
        DeviceCase{"rankdad", {"parallel.strategy=rankdad"}, 2},
        DeviceCase{"zero3", {"parallel.strategy=zero", "parallel.zero.stage=3"}, 2},
        DeviceCase{"pipeline", {"parallel.strategy=pipeline", "parallel.pipeline.stages=2"}, 2},
        DeviceCase{"dsgd", {"parallel.strategy=decentralized"}, 2},
        // Tensor parallelism on a small vit: tp 2 alone, and the 2-D mesh (zero over
        // dp_shard 2 x tp 2) on four ranks.
        DeviceCase{"tp2", {kSmallVit, "parallel.strategy=data_parallel", "parallel.mesh.tp=2"}, 2},
        DeviceCase{"zero_tp_2x2",
                   {kSmallVit, "parallel.strategy=zero", "parallel.mesh.dp_shard=2", "parallel.mesh.tp=2"},
                   4},
        DeviceCase{"choco",
                   {"parallel.strategy=decentralized", "parallel.decentralized.algorithm=choco",
                    "parallel.decentralized.compressor=topk"},
                   2}),
    [](const ::testing::TestParamInfo<DeviceCase>& info) { return info.param.label; });

}  // namespace
}  // namespace dtrain::train
