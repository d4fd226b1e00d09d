// dtrain's mpi backend against the raw MPI call for the same operation on the same buffers in the
// same process, A B A B: MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, and MPI_Irecv +
// MPI_Isend + MPI_Waitall for sendrecv (--op; sizes as `dtrain bench comm` means them). Run with
// mpirun (bench/comm_compare.sh). dtrain initialises MPI (MPI_THREAD_SERIALIZED, for its progress
// thread); the raw loop then uses MPI_COMM_WORLD (or, with --raw-comm dup, a duplicate of it).
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
  const std::string op = bench::checked_op(flags.get("op", "allreduce"));
  const int iters = flags.get_int("iters", 50);
  const int rounds = flags.get_int("rounds", 4);
  const int warmup = flags.get_int("warmup", 10);
  // --raw-comm dup: the raw calls on a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, as
  // dtrain's communicator is, instead of on MPI_COMM_WORLD itself.
  const std::string raw_comm = flags.get("raw-comm", "world");

  dtrain::comm::BackendOptions backend;
  backend.name = "mpi";
  auto comm = dtrain::comm::connect(
      backend, dtrain::comm::resolve_rendezvous({}, dtrain::config::process_environment()));
  int provided = 0;
  MPI_Query_thread(&provided);
  MPI_Comm raw = MPI_COMM_WORLD;
  if (raw_comm == "dup") {
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    MPI_Comm_set_errhandler(raw, MPI_ERRORS_RETURN);
  } else if (raw_comm != "world") {
    std::fprintf(stderr, "mpi_compare: --raw-comm is world or dup; found %s\n", raw_comm.c_str());
    return 2;
  }
  const int n = comm->size();
  const int next = (comm->rank() + 1) % n;
  const int previous = (comm->rank() + n - 1) % n;

  auto slowest = [](double v) {
    double out = v;
    MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
  };
  if (comm->rank() == 0) {
    std::printf("# mpi_compare op=%s world=%d thread_level=%d iters=%d rounds=%d\n", op.c_str(), n, provided,
                iters, rounds);
  }
  for (const auto bytes : sizes) {
    // Zeros: repeated sums never overflow or turn denormal. `whole` is the all-reduced buffer,
    // reduce_scatter's input, allgather's output and sendrecv's outgoing message; `part` one chunk
    // of it, or sendrecv's incoming message.
    const bool chunked = op == "reduce_scatter" || op == "allgather";
    const std::int64_t chunk = chunked ? bytes / 4 / n : bytes / 4;
    torch::Tensor whole = torch::zeros({chunked ? chunk * n : chunk});
    torch::Tensor part = torch::zeros({chunk});
    float* w = whole.data_ptr<float>();
    float* p = part.data_ptr<float>();
    const int count = static_cast<int>(chunk);
    std::function<void()> plain, ours;
    if (op == "allreduce") {
      plain = [&] { MPI_Allreduce(MPI_IN_PLACE, w, count, MPI_FLOAT, MPI_SUM, raw); };
      ours = [&] { comm->allreduce(whole); };
    } else if (op == "reduce_scatter") {
      plain = [&] { MPI_Reduce_scatter_block(w, p, count, MPI_FLOAT, MPI_SUM, raw); };
      ours = [&] { comm->reduce_scatter(whole, part); };
    } else if (op == "allgather") {
      plain = [&] { MPI_Allgather(p, count, MPI_FLOAT, w, count, MPI_FLOAT, raw); };
      ours = [&] { comm->allgather(part, whole); };
    } else {
      plain = [&] {
        MPI_Request requests[2];
        MPI_Irecv(p, count, MPI_FLOAT, previous, 0, raw, &requests[0]);
        MPI_Isend(w, count, MPI_FLOAT, next, 0, raw, &requests[1]);
        MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
      };
      ours = [&] {
        auto received = comm->recv(part, previous, 0, /*async_op=*/true);
        comm->send(whole, next, 0, /*async_op=*/true)->wait();
        received->wait();
      };
    }
    for (int i = 0; i < warmup; ++i) {
      plain();
      ours();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const auto c = bench::compare_ab(rounds, iters, plain, ours, slowest);
    if (comm->rank() == 0) bench::print_comparison("mpi:" + op, bytes, c);
  }
  if (raw != MPI_COMM_WORLD) MPI_Comm_free(&raw);
  comm->barrier();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mpi_compare: error: %s\n", e.what());
  return 1;
}
