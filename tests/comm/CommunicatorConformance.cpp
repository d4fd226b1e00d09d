// The Communicator contract, part 1: the collectives' results. Every reduction is checked against
// its closed form for every dtype the backend reduces and sizes from empty to past the mpi ring
// threshold; every data movement for every dtype the backends carry. See CommunicatorConformance.h.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "comm/CommunicatorConformance.h"

#include <algorithm>
#include <sstream>

namespace dtrain::testing {

using comm::CommError;
using comm::Communicator;
using comm::ReduceOp;

namespace {

// See contribution().
std::int64_t period(at::ScalarType dtype) {
  const bool narrow = dtype == at::kChar || dtype == at::kByte || dtype == at::kBFloat16;
  return narrow ? 16 : 64;
}

// "Float[2, 3] {1, 2, 3, 4, 5, 6}", at most the first 12 elements.
std::string describe(const at::Tensor& t) {
  std::ostringstream out;
  out << c10::toString(t.scalar_type()) << t.sizes() << " {";
  const at::Tensor head = t.flatten().slice(0, 0, 12).to(at::kDouble).contiguous();
  for (std::int64_t i = 0; i < head.numel(); ++i) out << (i ? ", " : "") << head.data_ptr<double>()[i];
  out << (t.numel() > 12 ? ", ...}" : "}");
  return out.str();
}

}  // namespace

const std::vector<at::ScalarType> kMovedDtypes{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kChar,
                                               at::kShort, at::kInt,    at::kLong, at::kByte,     at::kBool};

void PrintTo(const ConformanceWorld& world, std::ostream* os) {
  *os << world.backend << " world of " << world.size << " ranks";
}

std::string conformance_name(const ::testing::TestParamInfo<ConformanceWorld>& info) {
  return "n" + std::to_string(info.param.size);
}

bool CommunicatorConformance::reduces(at::ScalarType dtype) const {
  const auto& dtypes = GetParam().reduced_dtypes;
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

std::vector<at::ScalarType> CommunicatorConformance::arithmetic_dtypes() const {
  std::vector<at::ScalarType> dtypes;
  for (auto dtype : GetParam().reduced_dtypes) {
    if (dtype != at::kBool) dtypes.push_back(dtype);
  }
  return dtypes;
}

at::Tensor CommunicatorConformance::on_device(const at::Tensor& cpu) const {
  // Always a copy: the operations are in place, and the caller may still need `cpu`.
  return cpu.to(at::Device(GetParam().device), /*non_blocking=*/false, /*copy=*/true);
}

::testing::AssertionResult same(const at::Tensor& actual, const at::Tensor& expected) {
  const at::Tensor got = actual.cpu();
  if (got.scalar_type() == expected.scalar_type() && got.sizes() == expected.sizes() &&
      at::equal(got, expected)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "got " << describe(got) << ", expected " << describe(expected);
}

at::Tensor pattern(std::int64_t begin, std::int64_t numel, at::ScalarType dtype) {
  return at::arange(begin, begin + numel, at::kDouble).remainder(static_cast<double>(period(dtype)));
}

at::Tensor contribution(int rank, std::int64_t numel, at::ScalarType dtype) {
  const at::Tensor values = pattern(0, numel, dtype) + (rank + 1);
  if (dtype == at::kBool) return values.remainder(2) == 1;
  return values.to(dtype);
}

at::Tensor reduced(const at::Tensor& pattern, ReduceOp op, int n) {
  switch (op) {
    case ReduceOp::Sum:
      return pattern * n + n * (n + 1) / 2.0;
    case ReduceOp::Max:
      return pattern + n;
    case ReduceOp::Min:
      return pattern + 1;
    case ReduceOp::Avg:
      return pattern + (n + 1) / 2.0;
  }
  TORCH_INTERNAL_ASSERT(false, "unknown reduce op");
}

namespace {

constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg};

bool applies(ReduceOp op, at::ScalarType dtype) {
  return op != ReduceOp::Avg || at::isFloatingType(dtype);
}

std::string label(const Communicator& comm, at::ScalarType dtype, std::int64_t numel) {
  return "rank " + std::to_string(comm.rank()) + " " + c10::toString(dtype) + " numel " +
         std::to_string(numel);
}

// A collective that must work after whatever the test did before it, on every rank: the sum of
// `ones` over the ranks.
void expect_world_works(Communicator& comm, const at::Tensor& ones) {
  at::Tensor t = ones.clone();
  comm.allreduce(t);
  EXPECT_TRUE(same(t, at::full_like(ones.cpu(), comm.size()))) << "rank " << comm.rank();
}

TEST_P(CommunicatorConformance, ReportsBackendRankAndSize) {
  const int n = this->n();
  world([&](Communicator& comm) {
    EXPECT_EQ(comm.backend(), GetParam().backend);
    EXPECT_EQ(comm.size(), n);
    ASSERT_GE(comm.rank(), 0);
    ASSERT_LT(comm.rank(), n);
    // Every rank number once: gathered in rank order they count 0..n-1.
    at::Tensor ranks = on_device(at::zeros({n}, at::kInt));
    comm.allgather(on_device(at::full({1}, comm.rank(), at::kInt)), ranks);
    EXPECT_TRUE(same(ranks, at::arange(n, at::kInt)));
  });
}

// Blocking and asynchronous: mpi runs them on different paths (MPI_Allreduce under the watchdog,
// and its own recursive doubling or ring, by size).
TEST_P(CommunicatorConformance, AllreduceSumMaxMinAvgMatchClosedForm) {
  const int n = this->n();
  world([&](Communicator& comm) {
    for (auto dtype : arithmetic_dtypes()) {
      for (std::int64_t numel : {0, 1, 3, 7, 1000, 40000}) {
        for (ReduceOp op : kOps) {
          if (!applies(op, dtype)) continue;
          for (bool async_op : {false, true}) {
            at::Tensor t = on_device(contribution(comm.rank(), numel, dtype));
            comm.allreduce(t, op, async_op)->wait();
            EXPECT_TRUE(same(t.to(at::kDouble), reduced(pattern(0, numel, dtype), op, n)))
                << label(comm, dtype, numel) << " " << to_string(op) << (async_op ? " async" : "");
          }
        }
      }
    }
  });
}

TEST_P(CommunicatorConformance, AvgOfIntegersIsRefusedBeforeCommunicating) {
  const int n = this->n();
  world([&](Communicator& comm) {
    for (auto dtype : arithmetic_dtypes()) {
      if (at::isFloatingType(dtype)) continue;
      at::Tensor t = on_device(at::ones({4}, dtype));
      at::Tensor out = on_device(at::empty({1}, dtype));
      at::Tensor in = on_device(at::ones({n}, dtype));
      for (const char* op : {"allreduce", "reduce_scatter"}) {
        try {
          if (op == std::string("allreduce")) {
            comm.allreduce(t, ReduceOp::Avg);
          } else {
            comm.reduce_scatter(in, out, ReduceOp::Avg);
          }
          // A world of one reduces nothing and has nothing to refuse.
          if (n > 1) ADD_FAILURE() << op << " avg of " << c10::toString(dtype) << " was accepted";
        } catch (const CommError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("floating-point"), std::string::npos) << what;
          EXPECT_NE(what.find(op), std::string::npos) << what;
          EXPECT_EQ(e.rank(), comm.rank());
        }
      }
    }
    expect_world_works(comm, on_device(at::ones({4})));
  });
}

TEST_P(CommunicatorConformance, DtypesTheBackendCannotReduceAreRefused) {
  if (n() == 1) GTEST_SKIP() << "a world of one reduces nothing and has nothing to refuse";
  std::vector<at::ScalarType> refused{at::kComplexFloat};
  for (auto dtype : kMovedDtypes) {
    if (!reduces(dtype)) refused.push_back(dtype);
  }
  world([&](Communicator& comm) {
    for (auto dtype : refused) {
      at::Tensor t = on_device(at::ones({4}, dtype));
      try {
        comm.allreduce(t);
        ADD_FAILURE() << "allreduce of " << c10::toString(dtype) << " was accepted";
      } catch (const CommError& e) {
        EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
        EXPECT_EQ(e.rank(), comm.rank());
      }
      // Refused on every rank alike, and before anything was sent: the world still works.
      expect_world_works(comm, on_device(at::ones({4})));
    }
  });
}

TEST_P(CommunicatorConformance, OutputsOverlappingTheirInputAreRefused) {
  const int n = this->n();
  if (n == 1) GTEST_SKIP() << "a world of one copies; there is nothing to refuse";
  world([&](Communicator& comm) {
    // The output is the input's own chunk (reduce_scatter, allgather) or the input itself
    // (alltoall): MPI forbids it, and gloo's ring would write its output before reading its input.
    at::Tensor buffer = on_device(at::ones({4 * n}));
    const std::vector<std::pair<std::string, std::function<void()>>> calls{
        {"reduce_scatter", [&] { comm.reduce_scatter(buffer, buffer.narrow(0, 4 * comm.rank(), 4)); }},
        {"allgather", [&] { comm.allgather(buffer.narrow(0, 4 * comm.rank(), 4), buffer); }},
        {"alltoall", [&] { comm.alltoall(buffer, buffer); }},
    };
    for (const auto& [op, call] : calls) {
      try {
        call();
        ADD_FAILURE() << op << " with an overlapping output was accepted";
      } catch (const CommError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("overlaps"), std::string::npos) << what;
        EXPECT_NE(what.find(op), std::string::npos) << what;
      }
    }
    // Refused before anything was sent: the world still works.
    expect_world_works(comm, on_device(at::ones({4})));
  });
}

TEST_P(CommunicatorConformance, AllreduceOfBoolIsAnyOrAll) {
  if (!reduces(at::kBool)) GTEST_SKIP() << GetParam().backend << " does not reduce bool";
  const int n = this->n();
  world([&](Communicator& comm) {
    // Element i is true on rank i % n only.
    const at::Tensor flags = at::arange(12, at::kLong).remainder(n) == comm.rank();
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
      at::Tensor t = on_device(flags);
      comm.allreduce(t, op);
      const bool every_rank = op != ReduceOp::Min || n == 1;
      EXPECT_TRUE(same(t, at::full({12}, every_rank, at::kBool))) << to_string(op);
    }
  });
}

TEST_P(CommunicatorConformance, ReduceScatterReducesTheChunkOfThisRank) {
  const int n = this->n();
  world([&](Communicator& comm) {
    for (auto dtype : arithmetic_dtypes()) {
      for (std::int64_t chunk : {1, 6, 7, 1000, 10000}) {
        for (ReduceOp op : kOps) {
          if (!applies(op, dtype)) continue;
          at::Tensor input = on_device(contribution(comm.rank(), n * chunk, dtype));
          at::Tensor output = on_device(at::full({chunk}, 99, dtype));
          comm.reduce_scatter(input, output, op);
          // Element k of the input holds k % period + r + 1; this rank's chunk starts at rank * chunk.
          const at::Tensor expected = reduced(pattern(comm.rank() * chunk, chunk, dtype), op, n);
          EXPECT_TRUE(same(output.to(at::kDouble), expected))
              << label(comm, dtype, chunk) << " " << to_string(op);
        }
      }
    }
  });
}

// The layout of the output is flat: a (n, numel) output receives the same as a (n * numel) one.
TEST_P(CommunicatorConformance, AllgatherFillsTheOutputInRankOrder) {
  const int n = this->n();
  world([&](Communicator& comm) {
    for (auto dtype : kMovedDtypes) {
      for (std::int64_t numel : {1, 7, 1000, 20000}) {
        at::Tensor expected = at::empty({n, numel}, at::TensorOptions().dtype(dtype));
        for (int r = 0; r < n; ++r) expected[r].copy_(contribution(r, numel, dtype));
        for (bool shaped : {false, true}) {
          const auto shape =
              shaped ? std::vector<std::int64_t>{n, numel} : std::vector<std::int64_t>{n * numel};
          at::Tensor output = on_device(at::zeros(shape, dtype));
          comm.allgather(on_device(contribution(comm.rank(), numel, dtype)), output);
          EXPECT_TRUE(same(output, expected.view(shape))) << label(comm, dtype, numel);
        }
      }
    }
  });
}

TEST_P(CommunicatorConformance, BroadcastFromEveryRoot) {
  const int n = this->n();
  world([&](Communicator& comm) {
    for (auto dtype : kMovedDtypes) {
      for (std::int64_t numel : {1, 33, 999, 100000}) {
        for (int root = 0; root < n; ++root) {
          // Shaped (3, 11) once: broadcast is in place on any contiguous shape.
          const auto shape =
              numel == 33 ? std::vector<std::int64_t>{3, 11} : std::vector<std::int64_t>{numel};
          at::Tensor t = on_device(contribution(comm.rank(), numel, dtype).view(shape));
          comm.broadcast(t, root);
          EXPECT_TRUE(same(t, contribution(root, numel, dtype).view(shape)))
              << label(comm, dtype, numel) << " root " << root;
        }
      }
    }
  });
}

TEST_P(CommunicatorConformance, AlltoallTransposesChunks) {
  const int n = this->n();
  world([&](Communicator& comm) {
    const int r = comm.rank();
    for (auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kShort, at::kInt, at::kLong}) {
      for (std::int64_t chunk : {1, 5, 50, 5000}) {
        // Element e of chunk j of rank r's input holds 100r + 10j + e % 10 and goes to rank j.
        const at::Tensor e = at::arange(chunk, at::kLong).remainder(10);
        at::Tensor input = at::empty({n, chunk}, at::kLong);
        at::Tensor expected = at::empty({n, chunk}, at::kLong);
        for (int j = 0; j < n; ++j) {
          input[j].copy_(e + 100 * r + 10 * j);
          expected[j].copy_(e + 100 * j + 10 * r);
        }
        at::Tensor output = on_device(at::zeros({n, chunk}, dtype));
        comm.alltoall(on_device(input.to(dtype)), output);
        EXPECT_TRUE(same(output, expected.to(dtype))) << label(comm, dtype, chunk);
      }
    }
  });
}

TEST_P(CommunicatorConformance, EmptyTensorsAreNoOps) {
  world([&](Communicator& comm) {
    at::Tensor empty = on_device(at::empty({0}));
    at::Tensor out = on_device(at::empty({0}));
    comm.allreduce(empty);
    comm.broadcast(empty, 0);
    comm.allgather(empty, out);
    comm.reduce_scatter(empty, out);
    comm.alltoall(empty, out);
    // A real collective afterwards proves no rank was left waiting in one of the above.
    expect_world_works(comm, on_device(at::ones({4})));
  });
}

}  // namespace
}  // namespace dtrain::testing
