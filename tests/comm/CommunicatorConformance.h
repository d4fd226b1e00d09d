// The Communicator contract, stated once and run over every backend built: each test in
// CommunicatorConformance*.cpp checks its results against a closed form on every rank of a world.
// A backend takes part with one INSTANTIATE_TEST_SUITE_P over ConformanceWorlds that say how its
// ranks meet (gloo: ranks as threads of this process, GlooCommunicatorTest.cpp; mpi: this process
// is one rank under mpirun, mpi/MpiCommunicatorTest.cpp) and what it supports.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"

namespace dtrain::testing {

using RankFn = std::function<void(comm::Communicator&)>;

// One world of one backend, as the suite sees it.
struct ConformanceWorld {
  std::string backend;  // what Communicator::backend() reports
  int size = 1;
  // Runs fn on every rank of the world that lives in this process and returns once all have: all
  // `size` ranks as threads (gloo), or this process's own rank (mpi, one process per rank). A
  // failure on any rank fails the test.
  std::function<void(const RankFn&)> run;
  // The dtypes allreduce and reduce_scatter reduce; the others must be refused with a CommError.
  // Data movement (allgather, broadcast, alltoall, send, recv) carries every dtype of kMovedDtypes.
  std::vector<at::ScalarType> reduced_dtypes;
  // Where the tensors live: CPU for gloo and mpi, CUDA (this thread's current device) for nccl.
  at::DeviceType device = at::kCPU;
  // The bytes the backend's algorithm makes `rank` send for `call` (Note [Wire bytes]), worked out
  // in the backend's test file from the algorithm's description, for the calls of
  // WireBytesAreWhatTheBackendsAlgorithmSends (CommunicatorConformanceStats.cpp).
  std::function<std::uint64_t(const comm::WireCall& call, int rank)> expected_wire_bytes;
};

// "gloo world of 4 ranks", in gtest's messages.
void PrintTo(const ConformanceWorld& world, std::ostream* os);
// The test name suffix: "n4".
std::string conformance_name(const ::testing::TestParamInfo<ConformanceWorld>& info);

// The dtypes every backend moves (allgather, broadcast, alltoall, send/recv), and that a
// backend's reduced_dtypes are drawn from.
extern const std::vector<at::ScalarType> kMovedDtypes;

class CommunicatorConformance : public ::testing::TestWithParam<ConformanceWorld> {
 protected:
  int n() const { return GetParam().size; }
  // See ConformanceWorld::run.
  void world(const RankFn& fn) const { GetParam().run(fn); }
  bool reduces(at::ScalarType dtype) const;
  // The backend's reduced dtypes that have a closed form under sum/max/min/avg (not bool).
  std::vector<at::ScalarType> arithmetic_dtypes() const;
  // A CPU tensor on the backend's device.
  at::Tensor on_device(const at::Tensor& cpu) const;
};

// True when `actual` (on any device) has expected's dtype and shape and equal elements; otherwise
// the failure shows both.
::testing::AssertionResult same(const at::Tensor& actual, const at::Tensor& expected);

// What every test sends, small enough that any sum over four ranks is exact in every dtype:
// element i of rank r's contribution is i % period + r + 1, where the period is 64, or 16 for
// 8-bit integers and bfloat16 (integers exact to 127 and 256). For bool: that value's parity.
at::Tensor contribution(int rank, std::int64_t numel, at::ScalarType dtype);
// i % period for i in [begin, begin + numel), as float64: the rank-independent part above.
at::Tensor pattern(std::int64_t begin, std::int64_t numel, at::ScalarType dtype);
// The closed form of `op` over ranks 0..n-1 contributing pattern + r + 1, as float64.
at::Tensor reduced(const at::Tensor& pattern, comm::ReduceOp op, int n);

}  // namespace dtrain::testing
