// Times dtrain's mpi all-reduce against a plain MPI_Allreduce on the same buffer in the same
// process, alternating A B A B so that machine noise hits both alike; prints the median ratios.
// Usage: mpirun -n 2 --bind-to none --mca mpi_yield_when_idle 1 dtrain_comm_mpi_timing [rounds]
#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dtrain/comm/mpi/MpiCommunicator.h"
#include "dtrain/util/Clock.h"

namespace {

using dtrain::util::Clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Body>
double seconds_per_call(MPI_Comm sync, int iterations, Body body) {
  MPI_Barrier(sync);
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) body();
  return dtrain::util::seconds_since(start) / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain::comm;
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  BackendOptions options;
  options.name = "mpi";
  auto comm = connect_mpi(options, RendezvousInfo{});  // initialises MPI
  MPI_Comm plain;
  MPI_Comm_dup(MPI_COMM_WORLD, &plain);
  if (comm->rank() == 0)
    std::printf("%10s %12s %12s %8s %12s %8s\n", "bytes", "MPI us", "dtrain us", "ratio", "async us",
                "ratio");
  for (std::int64_t bytes : {std::int64_t{4096}, std::int64_t{1} << 20, std::int64_t{16} << 20}) {
    auto tensor = at::ones({bytes / 4}, at::kFloat);
    const int count = static_cast<int>(tensor.numel());
    const int iterations = bytes <= 4096 ? 2000 : bytes <= (1 << 20) ? 100 : 10;
    std::vector<double> mpi, ours, ours_async;
    for (int round = 0; round < rounds + 1; ++round) {
      const double a = seconds_per_call(plain, iterations, [&] {
        MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), count, MPI_FLOAT, MPI_SUM, plain);
      });
      const double b = seconds_per_call(plain, iterations, [&] { comm->allreduce(tensor); });
      const double c =
          seconds_per_call(plain, iterations, [&] { comm->allreduce(tensor, ReduceOp::Sum, true)->wait(); });
      if (round == 0) continue;  // warm-up
      mpi.push_back(a);
      ours.push_back(b);
      ours_async.push_back(c);
    }
    if (comm->rank() == 0) {
      const double a = median(mpi), b = median(ours), c = median(ours_async);
      std::printf("%10lld %12.1f %12.1f %8.2f %12.1f %8.2f\n", static_cast<long long>(bytes), a * 1e6,
                  b * 1e6, b / a, c * 1e6, c / a);
    }
  }
  MPI_Comm_free(&plain);
  return 0;
}
