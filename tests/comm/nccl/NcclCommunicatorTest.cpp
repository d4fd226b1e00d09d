// The nccl backend (CUDA builds of LibTorch only): the Communicator contract over CUDA tensors,
// ranks as threads of this process with a GPU each (NCCL refuses two ranks on one GPU), for world
// sizes 1 up to the GPUs this machine has, at most 4. Built only where comm/ builds nccl.
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "comm/CommunicatorConformance.h"
#include "dtrain/comm/Backend.h"
#include "dtrain/comm/nccl/NcclCommunicator.h"
#include "support/ThreadWorld.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using dtrain::testing::CommunicatorConformance;
using dtrain::testing::ConformanceWorld;

// NCCL reduces every arithmetic dtype the suite sends except int16, which it does not know.
const std::vector<at::ScalarType> kNcclReduced{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                               at::kChar,  at::kByte,   at::kInt,  at::kLong};

int gpus() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

std::vector<ConformanceWorld> nccl_worlds() {
  std::vector<ConformanceWorld> worlds;
  for (int n = 1; n <= std::min(4, gpus()); ++n) {
    ConformanceWorld world;
    world.backend = "nccl";
    world.size = n;
    world.device = at::kCUDA;
    world.reduced_dtypes = kNcclReduced;
    // The backend records a ring's bytes (NCCL does not say which algorithm it ran): the suite
    // checks that every call is recorded with them.
    world.expected_wire_bytes = [n](const WireCall& call, int rank) {
      return nccl_wire_estimate(call, rank, n);
    };
    world.run = [n](const dtrain::testing::RankFn& fn) {
      auto options = dtrain::testing::WorldOptions::on("nccl");
      options.timeout = 60s;
      dtrain::testing::run_world(
          n,
          [&](const CommunicatorPtr& comm) {
            // Each rank's thread works on its own GPU: the conformance suite makes its tensors on
            // the current device.
            c10::cuda::set_device(static_cast<c10::DeviceIndex>(comm->rank()));
            fn(*comm);
          },
          options);
    };
    worlds.push_back(world);
  }
  return worlds;
}

INSTANTIATE_TEST_SUITE_P(Nccl, CommunicatorConformance, ::testing::ValuesIn(nccl_worlds()),
                         dtrain::testing::conformance_name);
// A machine without a GPU instantiates no world; that is not a failure of the suite.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CommunicatorConformance);

TEST(NcclCommunicator, ARankWithoutAGpuOfItsOwnIsRefusedNamingTheLimit) {
  if (gpus() == 0) GTEST_SKIP() << "no CUDA device";
  BackendOptions options;
  options.name = "nccl";
  options.timeout = 10s;
  RendezvousInfo info = dtrain::testing::thread_rank_info(gpus(), gpus() + 1, 1, 10s);
  try {
    connect(options, info);
    FAIL() << "a local rank past the GPUs was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("has no GPU of its own"), std::string::npos) << e.what();
  }
}

TEST(NcclCommunicator, AllreduceOnTheGpuEqualsTheClosedForm) {
  if (gpus() == 0) GTEST_SKIP() << "no CUDA device";
  const int n = std::min(4, gpus());
  auto options = dtrain::testing::WorldOptions::on("nccl");
  dtrain::testing::run_world(
      n,
      [&](const CommunicatorPtr& comm) {
        c10::cuda::set_device(static_cast<c10::DeviceIndex>(comm->rank()));
        EXPECT_EQ(comm->backend(), "nccl");
        at::Tensor t =
            torch::arange(1000, torch::dtype(torch::kFloat).device(torch::kCUDA)) * (comm->rank() + 1);
        comm->allreduce(t);
        const double factor = n * (n + 1) / 2.0;
        EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(1000, torch::kFloat) * factor));
      },
      options);
}

}  // namespace
}  // namespace dtrain::comm
