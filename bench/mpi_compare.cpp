// dtrain's mpi all-reduce against a plain MPI_Allreduce loop on the same buffer in the same
// process, A B A B. Run with mpirun -np 2 (bench/comm_compare.sh). dtrain initialises MPI
// (MPI_THREAD_SERIALIZED, for its progress thread); the plain loop then uses MPI_COMM_WORLD.
#include <mpi.h>
#include <torch/torch.h>

#include <cstdio>
#include <exception>

#include "BenchCommon.h"
#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"

int main(int argc, char** argv) try {
  const bench::Flags flags(argc, argv);
  const auto sizes = bench::parse_sizes(flags.get("sizes", "4K,1M,16M"));
  const int iters = flags.get_int("iters", 50);
  const int rounds = flags.get_int("rounds", 4);
  const int warmup = flags.get_int("warmup", 10);

  dtrain::comm::BackendOptions backend;
  backend.name = "mpi";
  auto comm = dtrain::comm::connect(
      backend, dtrain::comm::resolve_rendezvous({}, dtrain::config::process_environment()));
  int provided = 0;
  MPI_Query_thread(&provided);

  auto slowest = [](double v) {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  };
  if (comm->rank() == 0) {
    std::printf("# mpi_compare world=%d thread_level=%d iters=%d rounds=%d\n", comm->size(), provided, iters,
                rounds);
  }
  for (const auto bytes : sizes) {
    // Zeros: repeated sums never overflow or turn denormal.
    torch::Tensor buffer = torch::zeros({bytes / 4});
    auto plain = [&] {
      MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr<float>(), static_cast<int>(buffer.numel()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
    };
    auto ours = [&] { comm->allreduce(buffer); };
    for (int i = 0; i < warmup; ++i) {
      plain();
      ours();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const auto c = bench::compare_ab(rounds, iters, plain, ours, slowest);
    if (comm->rank() == 0) bench::print_comparison("mpi", bytes, c);
  }
  comm->barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mpi_compare: error: %s\n", e.what());
  return 1;
}
