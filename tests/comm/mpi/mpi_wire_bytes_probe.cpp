// Run twice by the comm.mpi.monitored tests (monitored_wire_bytes.sh) under OpenMPI's pml
// monitoring, which writes the payload bytes each process sent to each peer to a file at
// MPI_Finalize: once with `0` (connect and leave) and once with `1` (every operation below, at
// sizes across every band of OpenMPI 4.1's all-reduce rules and both of dtrain's all-reduce
// algorithms). Each rank prints the wire bytes it recorded, "rank R recorded N"; the difference
// between the two runs' monitored bytes must equal N on every rank, which checks Note [OpenMPI's
// algorithms] against the library that runs.
#include <ATen/ATen.h>

#include <cstdio>
#include <cstdlib>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/mpi/MpiCommunicator.h"

namespace {

using dtrain::comm::Communicator;
using dtrain::comm::ReduceOp;

// Element counts that do not divide evenly, from 1 to past 1 MiB.
const std::int64_t kAllreduceSizes[] = {1,     3,     255,   1001,  1024,  1500,  2048,   3001,  4096,
                                        10000, 16383, 16384, 30001, 65535, 65536, 100001, 262147};

void allreduces(Communicator& comm, at::ScalarType dtype) {
  for (const auto numel : kAllreduceSizes) {
    for (const bool async_op : {false, true}) {
      at::Tensor t = at::ones({numel}, dtype);
      comm.allreduce(t, ReduceOp::Sum, async_op)->wait();
    }
  }
}

// Blocks of a blocking reduce_scatter in every band of OpenMPI 4.1's reduce_scatter_block rules
// (basic linear, recursive doubling, recursive halving, butterfly) for up to 31 ranks, as float32
// elements; 1-, 2- and 3-byte blocks in uint8 and float16.
const std::int64_t kReduceScatterFloats[] = {1,     2,     3,     5,     7,      31,     32,    63,
                                             64,    100,   1023,  1024,  2047,   2048,   4095,  4096,
                                             32767, 32768, 65535, 65536, 131071, 262144, 300000};

void reduce_scatters(Communicator& comm) {
  const int n = comm.size();
  for (const auto block : kReduceScatterFloats) {
    at::Tensor whole = at::ones({n * block});
    at::Tensor out = at::empty({block});
    comm.reduce_scatter(whole, out);
  }
  for (const std::int64_t block : {1, 2, 3}) {
    at::Tensor whole = at::ones({n * block}, at::kByte);
    at::Tensor out = at::empty({block}, at::kByte);
    comm.reduce_scatter(whole, out);
  }
  at::Tensor half = at::ones({n}, at::kHalf);
  at::Tensor one = at::empty({1}, at::kHalf);
  comm.reduce_scatter(half, one);
}

void movements(Communicator& comm, std::int64_t numel) {
  const int n = comm.size();
  at::Tensor t = at::ones({numel});
  at::Tensor whole = at::ones({n * numel});
  at::Tensor out = at::empty({n * numel});
  comm.allgather(t, out);
  for (int root = 0; root < n; ++root) comm.broadcast(t, root);
  comm.reduce_scatter(whole, t);
  comm.reduce_scatter(whole, t, ReduceOp::Sum, /*async_op=*/true)->wait();
  comm.allgather(t, out, /*async_op=*/true)->wait();
  comm.alltoall(whole, out);
  at::Tensor inbox = at::empty({numel});
  auto receive = comm.recv(inbox, (comm.rank() + n - 1) % n, /*tag=*/3, /*async_op=*/true);
  comm.send(t, (comm.rank() + 1) % n, /*tag=*/3);
  receive->wait();
  comm.barrier();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtrain::comm;
  const bool operate = argc > 1 && std::atoi(argv[1]) != 0;
  BackendOptions options;
  options.name = "mpi";
  options.timeout = std::chrono::seconds(60);
  std::uint64_t recorded = 0;
  int rank = 0;
  {
    auto comm = connect_mpi(options, RendezvousInfo{});
    rank = comm->rank();
    if (operate) {
      allreduces(*comm, at::kFloat);
      allreduces(*comm, at::kHalf);
      for (const std::int64_t numel : {1, 1001, 40000}) movements(*comm, numel);
      reduce_scatters(*comm);
    }
    recorded = comm->stats().total().wire_bytes;
  }  // the communicator is gone before MPI is finalised at exit
  std::printf("rank %d recorded %llu\n", rank, static_cast<unsigned long long>(recorded));
  return 0;
}
