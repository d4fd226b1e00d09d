// The pipeline on the mpi backend under mpirun, a stage per process: both schedules equal one
// process (PipelineChecks.h), with the receives each stage posts ahead (Note [Receives posted ahead]
// in PipelineStrategy.cpp) matched by MPI rather than Gloo. Part of dtrain_parallel_mpi_tests.
#include <gtest/gtest.h>

#include "dtrain/comm/Communicator.h"
#include "parallel/pipeline/PipelineChecks.h"

namespace dtrain::parallel {
extern comm::CommunicatorPtr g_world;  // DataParallelMpiTest.cpp's main() owns it
namespace {

TEST(PipelineMpi, GpipeEqualsOneProcess) {
  pipeline::checks::expect_rank_equals_local(g_world, pipeline::ScheduleKind::GPipe, 4, "sgd");
}

TEST(PipelineMpi, OneFOneBEqualsOneProcessWithMicroBatchesThatDoNotDivideTheBatch) {
  pipeline::checks::expect_rank_equals_local(g_world, pipeline::ScheduleKind::OneFOneB, 5, "adam");
}

}  // namespace
}  // namespace dtrain::parallel
