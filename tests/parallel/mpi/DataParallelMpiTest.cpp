// DataParallel's gradient compressions on the mpi backend under mpirun: each process is one rank
// and runs the checks that the gloo tests run with ranks as threads (CompressionChecks.h): every
// compression option gives the mean gradient with its bytes, and PowerSGD's error feedback
// converges. With PipelineMpiTest.cpp (the pipeline, a stage per process) built as
// dtrain_parallel_mpi_tests and run by CTest at 2 and 3 ranks
// (parallel.mpi.np2, np3), e.g.
//   mpirun -n 3 --oversubscribe build/tests/parallel/dtrain_parallel_mpi_tests
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "dtrain/comm/mpi/MpiCommunicator.h"
#include "parallel/data_parallel/CompressionChecks.h"

namespace dtrain::parallel {

// MPI_COMM_WORLD's communicator, owned by main() (PipelineMpiTest.cpp's tests use it too).
comm::CommunicatorPtr g_world;

namespace {

TEST(DataParallelCompressionMpi, EveryOptionGivesTheMeanGradient) {
  for (const auto& c : testing::compression_cases()) testing::expect_compression_gives_the_mean(g_world, c);
}

TEST(DataParallelCompressionMpi, PowerSgdErrorFeedbackConverges) {
  testing::expect_error_feedback_converges(g_world);
}

}  // namespace
}  // namespace dtrain::parallel

int main(int argc, char** argv) {
  using namespace dtrain;
  int failed = 0;
  {
    comm::BackendOptions options;
    options.name = "mpi";
    // A rank that fails an assertion and skips a collective turns the others' hang into an error.
    options.timeout = std::chrono::seconds(60);
    parallel::g_world = comm::connect_mpi(options, comm::RendezvousInfo{});
    ::testing::InitGoogleTest(&argc, argv);
    torch::set_num_threads(1);
    const int mine = RUN_ALL_TESTS() != 0 ? 1 : 0;
    // Every rank exits non-zero when any rank failed, so mpirun and CTest see the failure.
    auto verdict = at::full({1}, mine, at::kInt);
    parallel::g_world->allreduce(verdict, comm::ReduceOp::Max);
    failed = verdict.item<int>();
    parallel::g_world.reset();
  }  // the communicator is gone before MPI is finalised at exit
  return failed;
}
