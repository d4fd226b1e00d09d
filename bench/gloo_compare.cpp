// dtrain's gloo backend against the raw library for the same operation on the same buffers in the
// same process, A B A B (--op; sizes as `dtrain bench comm` means them). Raw is what the gloo
// backend is built on, called as its own users would: a plain c10d ProcessGroupGloo (default
// Options: 2 threads, createDefaultDevice) for allreduce, allgather (its list form) and sendrecv
// (recv and send, then wait both). reduce_scatter is compared twice, one line each:
//   gloo:reduce_scatter     c10d Gloo's own reduce_scatter. LibTorch 1.13's ProcessGroupGloo has
//                           none; PyTorch 2.3 added one (pytorch#118911, `_reduce_scatter_base`):
//                           clone the input, all-reduce the clone on c10d's worker thread, copy
//                           this rank's chunk out. Against LibTorch >= 2.3 c10d's call is made (what
//                           that release runs); against 1.13 the three steps of 2.3's are made
//                           through 1.13's own allreduce.
//   gloo:reduce_scatter/hd  Gloo's ReduceScatterHalvingDoubling run inline on the caller's thread,
//                           on a Gloo context of its own, built once per size and run on the same
//                           buffer each call: the algorithm's best case, which no c10d call reaches
//                           (Note [Gloo's native collectives]: why dtrain queues instead).
// Start one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; dtrain meets at
// MASTER_PORT, the raw group at MASTER_PORT + 1 (bench/comm_compare.sh).
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

  const auto env = dtrain::config::process_environment();
  const auto rendezvous = dtrain::comm::resolve_rendezvous({}, env);
  dtrain::comm::BackendOptions backend;
  backend.name = "gloo";
  auto comm = dtrain::comm::connect(backend, rendezvous);
  const int n = comm->size();
  const int next = (comm->rank() + 1) % n;
  const int previous = (comm->rank() + n - 1) % n;

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(rendezvous.master_port + 1);
  store_options.isServer = rendezvous.rank == 0;
  store_options.numWorkers = rendezvous.world_size;
  auto store = c10::make_intrusive<c10d::TCPStore>(rendezvous.master_addr, store_options);
  auto options = c10d::ProcessGroupGloo::Options::create();
  auto device = c10d::ProcessGroupGloo::createDefaultDevice();
  options->devices.push_back(device);
  auto pg =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rendezvous.rank, rendezvous.world_size, options);
  // reduce_scatter's raw side: a Gloo context of its own, meeting through the same store.
  std::shared_ptr<gloo::rendezvous::Context> context;
  if (op == "reduce_scatter") {
    context = std::make_shared<gloo::rendezvous::Context>(rendezvous.rank, rendezvous.world_size);
    c10d::ProcessGroupGloo::GlooStore gloo_store(store);
    gloo::rendezvous::PrefixStore prefixed("raw_reduce_scatter", gloo_store);
    context->connectFullMesh(prefixed, device);
  }

  auto slowest = [&](double v) {
    std::vector<at::Tensor> t{torch::tensor({v}, torch::kFloat64)};
    pg->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
    return t[0].item<double>();
  };
  if (comm->rank() == 0) {
    std::printf("# gloo_compare op=%s world=%d plain_threads=%d omp=%d iters=%d rounds=%d\n", op.c_str(), n,
                options->threads, at::get_num_threads(), iters, rounds);
  }
  for (const auto bytes : sizes) {
    // Zeros: repeated sums never overflow or turn denormal. See mpi_compare.cpp for the buffers.
    const bool chunked = op == "reduce_scatter" || op == "allgather";
    const std::int64_t chunk = chunked ? bytes / 4 / n : bytes / 4;
    std::vector<at::Tensor> whole{torch::zeros({chunked ? chunk * n : chunk})};
    std::vector<at::Tensor> part{torch::zeros({chunk})};
    std::vector<std::vector<at::Tensor>> chunks{whole[0].split(chunk)};
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> halving_doubling;
    std::function<void()> ours;
    std::vector<std::pair<std::string, std::function<void()>>> raws;  // (line's name, raw call)
    if (op == "allreduce") {
      raws.emplace_back("gloo:allreduce", [&] { pg->allreduce(whole)->wait(); });
      ours = [&] { comm->allreduce(whole[0]); };
    } else if (op == "reduce_scatter") {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
      raws.emplace_back("gloo:reduce_scatter", [&] { pg->_reduce_scatter_base(part[0], whole[0])->wait(); });
#else
      raws.emplace_back("gloo:reduce_scatter", [&] {
        std::vector<at::Tensor> buffer{whole[0].clone()};
        pg->allreduce(buffer)->wait();
        part[0].copy_(buffer[0].chunk(n)[comm->rank()]);
      });
#endif
      halving_doubling = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
          context, std::vector<float*>{whole[0].data_ptr<float>()}, static_cast<int>(chunk * n),
          std::vector<int>(n, static_cast<int>(chunk)));
      raws.emplace_back("gloo:reduce_scatter/hd", [&] { halving_doubling->run(); });
      ours = [&] { comm->reduce_scatter(whole[0], part[0]); };
    } else if (op == "allgather") {
      raws.emplace_back("gloo:allgather", [&] { pg->allgather(chunks, part)->wait(); });
      ours = [&] { comm->allgather(part[0], whole[0]); };
    } else {
      raws.emplace_back("gloo:sendrecv", [&] {
        auto received = pg->recv(part, previous, 0);
        pg->send(whole, next, 0)->wait();
        received->wait();
      });
      ours = [&] {
        auto received = comm->recv(part[0], previous, 0, /*async_op=*/true);
        comm->send(whole[0], next, 0, /*async_op=*/true)->wait();
        received->wait();
      };
    }
    for (const auto& [name, plain] : raws) {
      for (int i = 0; i < warmup; ++i) {
        plain();
        ours();
      }
      pg->barrier()->wait();
      const auto c = bench::compare_ab(rounds, iters, plain, ours, slowest);
      if (comm->rank() == 0) bench::print_comparison(name, bytes, c);
    }
  }
  pg->barrier()->wait();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gloo_compare: error: %s\n", e.what());
  return 1;
}
