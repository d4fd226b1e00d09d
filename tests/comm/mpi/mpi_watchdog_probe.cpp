// Run by the comm.mpi.watchdog test under mpirun -np 2: rank 0 enters a blocking all-reduce that
// rank 1 never joins (rank 1 waits for a message that never comes). The watchdog must end rank 0
// after the 1 s timeout with a message naming rank, operation and size, and mpirun must then stop
// the job with a non-zero exit; the test checks both (see tests/comm/CMakeLists.txt).
#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdio>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/mpi/MpiCommunicator.h"

int main() {
  using namespace dtrain::comm;
  BackendOptions options;
  options.name = "mpi";
  options.timeout = std::chrono::seconds(1);
  auto comm = connect_mpi(options, RendezvousInfo{});
  if (comm->size() != 2) {
    std::fprintf(stderr, "run with mpirun -np 2\n");
    return 2;
  }
  auto t = at::ones({1024});
  if (comm->rank() == 0) {
    comm->allreduce(t);
    std::printf("rank 0: the all-reduce returned without its peer\n");
    return 0;
  }
  // Rank 1: never joins. A receive that nobody sends keeps it inside MPI until mpirun stops it.
  int never = 0;
  MPI_Recv(&never, 1, MPI_INT, 0, 12345, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  return 0;
}
