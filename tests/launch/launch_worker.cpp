// A worker for the launcher tests: joins the job from its environment (dtrain launch, torchrun
// or mpirun), all-reduces rank + 1 and prints the sum, so a test can see the ranks really met.
// With "--fail-first-attempt" rank 1 exits 3 in attempt 0, to test restarts: after the barrier that
// follows the print, so that every rank has printed before the launcher stops the attempt.
#include <torch/types.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <iostream>

#include "dtrain/comm/Backend.h"
#include "dtrain/config/Environment.h"

int main(int argc, char** argv) {
  const bool fail_first_attempt = argc > 1 && std::strcmp(argv[1], "--fail-first-attempt") == 0;
  try {
    const auto info = dtrain::comm::resolve_rendezvous({}, dtrain::config::process_environment());
    dtrain::comm::BackendOptions backend;
    backend.timeout = std::chrono::seconds(60);
    auto comm = dtrain::comm::connect(backend, info);
    auto value = torch::full({4}, static_cast<float>(comm->rank() + 1));
    comm->allreduce(value);
    std::cout << "rank " << comm->rank() << " size " << comm->size() << " sum " << value[0].item<float>()
              << " source " << info.source << " prefix " << info.store_prefix << std::endl;
    comm->barrier();
    if (fail_first_attempt && info.restart_count == 0 && comm->rank() == 1) return 3;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "launch_worker: " << e.what() << std::endl;
    return 1;
  }
}
