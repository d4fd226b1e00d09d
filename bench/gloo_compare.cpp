// dtrain's gloo all-reduce against a plain c10d ProcessGroupGloo loop written as a c10d user
// would (default Options: 2 threads, createDefaultDevice), on the same buffer in the same process,
// A B A B. Start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; dtrain
// meets at MASTER_PORT, the plain group at MASTER_PORT + 1 (bench/comm_compare.sh).
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

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

  const auto env = dtrain::config::process_environment();
  const auto rendezvous = dtrain::comm::resolve_rendezvous({}, env);
  dtrain::comm::BackendOptions backend;
  backend.name = "gloo";
  auto comm = dtrain::comm::connect(backend, rendezvous);

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(rendezvous.master_port + 1);
  store_options.isServer = rendezvous.rank == 0;
  store_options.numWorkers = rendezvous.world_size;
  auto store = c10::make_intrusive<c10d::TCPStore>(rendezvous.master_addr, store_options);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto pg =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rendezvous.rank, rendezvous.world_size, options);

  auto slowest = [&](double v) {
    std::vector<at::Tensor> t{torch::tensor({v}, torch::kFloat64)};
    pg->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
    return t[0].item<double>();
  };
  if (comm->rank() == 0) {
    std::printf("# gloo_compare world=%d plain_threads=%d omp=%d iters=%d rounds=%d\n", comm->size(),
                options->threads, at::get_num_threads(), iters, rounds);
  }
  for (const auto bytes : sizes) {
    std::vector<at::Tensor> buffer{torch::zeros({bytes / 4})};
    auto plain = [&] { pg->allreduce(buffer)->wait(); };
    auto ours = [&] { comm->allreduce(buffer[0]); };
    for (int i = 0; i < warmup; ++i) {
      plain();
      ours();
    }
    pg->barrier()->wait();
    const auto c = bench::compare_ab(rounds, iters, plain, ours, slowest);
    if (comm->rank() == 0) bench::print_comparison("gloo", bytes, c);
  }
  pg->barrier()->wait();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gloo_compare: error: %s\n", e.what());
  return 1;
}
