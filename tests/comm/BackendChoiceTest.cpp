// parallel.backend: auto (Note [Choosing a backend]): the choice and its one-line reason for each
// layout a job can have, in this build (with or without MPI and NCCL).
#include <gtest/gtest.h>

#include <algorithm>

#include "dtrain/comm/Backend.h"

namespace dtrain::comm {
namespace {

bool built(const std::string& name) {
  const auto names = available_backends();
  return std::find(names.begin(), names.end(), name) != names.end();
}

BackendLayout layout(int world, int local, bool mpi_processes, bool cuda = false) {
  BackendLayout l;
  l.world_size = world;
  l.local_world_size = local;
  l.mpi_processes = mpi_processes;
  l.cuda = cuda;
  return l;
}

TEST(BackendChoice, OneHostStartedByMpirunTakesSharedMemory) {
  const auto choice = choose_backend(layout(4, 4, true));
  if (built("mpi")) {
    EXPECT_EQ(choice.name, "mpi");
    EXPECT_EQ(describe(choice), "backend auto \u2192 mpi: 4 ranks on one host, shared memory");
  } else {
    EXPECT_EQ(choice.name, "gloo");
    EXPECT_EQ(describe(choice),
              "backend auto \u2192 gloo: 4 ranks on one host, but this build has no MPI; TCP over loopback");
  }
}

TEST(BackendChoice, OneHostNotStartedByMpirunTakesGloo) {
  const auto choice = choose_backend(layout(2, 2, false));
  EXPECT_EQ(choice.name, "gloo");
  EXPECT_NE(choice.reason.find("2 ranks on one host"), std::string::npos) << choice.reason;
  EXPECT_NE(choice.reason.find(built("mpi") ? "not started by mpirun" : "no MPI"), std::string::npos)
      << choice.reason;
}

TEST(BackendChoice, SeveralHostsTakeGlooUnlessMpirunAlreadyJoinedThem) {
  const auto choice = choose_backend(layout(8, 4, false));
  EXPECT_EQ(choice.name, "gloo");
  EXPECT_EQ(choice.reason, "8 ranks over several hosts (4 on this one), TCP between hosts");
  const auto under_mpirun = choose_backend(layout(8, 4, true));
  EXPECT_EQ(under_mpirun.name, built("mpi") ? "mpi" : "gloo");
  EXPECT_NE(under_mpirun.reason.find("8 ranks over several hosts (4 on this one)"), std::string::npos);
}

TEST(BackendChoice, OneRankCommunicatesNothing) {
  const auto choice = choose_backend(layout(1, 1, true));
  EXPECT_EQ(choice.name, "gloo");
  EXPECT_EQ(choice.reason, "1 rank, nothing to communicate");
}

TEST(BackendChoice, CudaTensorsTakeNcclWhereBuilt) {
  auto gpu_job = layout(2, 2, true, /*cuda=*/true);
  gpu_job.gpus = 2;
  const auto choice = choose_backend(gpu_job);
  if (built("nccl")) {
    EXPECT_EQ(choice.name, "nccl");
    EXPECT_EQ(choice.reason, "CUDA tensors, NCCL (2 rank(s) on a host of 2 GPU(s))");
  } else {
    // Without NCCL the layout decides, as for CPU tensors.
    EXPECT_EQ(choice.name, choose_backend(layout(2, 2, true)).name);
  }
}

TEST(BackendChoice, MoreRanksThanGpusShareThemThroughHostMemory) {
  auto gpu_job = layout(4, 4, true, /*cuda=*/true);
  gpu_job.gpus = 2;  // NCCL refuses two ranks on one GPU
  EXPECT_EQ(choose_backend(gpu_job).name, choose_backend(layout(4, 4, true)).name);
  gpu_job.gpus = 0;
  EXPECT_EQ(choose_backend(gpu_job).name, choose_backend(layout(4, 4, true)).name);
}

TEST(BackendChoice, AutoMustBeResolvedBeforeConnecting) {
  BackendOptions options;
  options.name = "auto";
  EXPECT_THROW(connect(options, RendezvousInfo{}), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::comm
