// The gloo latency study: plain c10d ProcessGroupGloo all-reduce, no dtrain code, under the
// variants that decide small-message latency on a few shared cores: worker threads, device
// (hostname, loopback interface), how calls are issued (wait each, barrier before each, many
// outstanding) and optional OpenMP compute between calls. Start one process per rank with
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set (bench/gloo_latency.sh does this).
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "BenchCommon.h"

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<::gloo::transport::Device> make_device(const std::string& kind) {
  if (kind == "default") return c10d::ProcessGroupGloo::createDefaultDevice();
  if (kind == "lo") return c10d::ProcessGroupGloo::createDeviceForInterface("lo");
  if (kind == "hostname") return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  throw std::invalid_argument("--device: expected default, lo or hostname; got '" + kind + "'");
}

}  // namespace

int main(int argc, char** argv) try {
  const bench::Flags flags(argc, argv);
  const int rank = std::stoi(bench::env_or("RANK", "0"));
  const int world = std::stoi(bench::env_or("WORLD_SIZE", "1"));
  const std::string addr = bench::env_or("MASTER_ADDR", "127.0.0.1");
  const int port = std::stoi(bench::env_or("MASTER_PORT", "29500"));
  const int threads = flags.get_int("threads", 2);  // c10d's default
  const std::string device = flags.get("device", "default");
  const std::string issue = flags.get("issue", "wait");  // wait | barrier | async
  // c10d: ProcessGroupGloo (work queue + worker threads); gloo: gloo::allreduce on the calling
  // thread over its own context, which isolates the cost of c10d's thread hand-offs.
  const std::string impl = flags.get("impl", "c10d");
  const int iters = flags.get_int("iters", 200);
  const int warmup = flags.get_int("warmup", 20);
  const int outstanding = flags.get_int("outstanding", 8);
  const int compute = flags.get_int("compute", 0);  // matmul side between calls, 0 = none
  const auto sizes = bench::parse_sizes(flags.get("sizes", "4K,1M"));

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(port);
  store_options.isServer = rank == 0;
  store_options.numWorkers = world;
  auto store = c10::make_intrusive<c10d::TCPStore>(addr, store_options);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->threads = threads;
  options->devices.push_back(make_device(device));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);

  std::shared_ptr<::gloo::rendezvous::Context> context;
  if (impl == "gloo") {
    context = std::make_shared<::gloo::rendezvous::Context>(rank, world);
    c10d::ProcessGroupGloo::GlooStore gloo_store(c10::make_intrusive<c10d::PrefixStore>("raw", store));
    auto raw_device = make_device(device);
    context->connectFullMesh(gloo_store, raw_device);
  } else if (impl != "c10d") {
    throw std::invalid_argument("--impl: expected c10d or gloo; got '" + impl + "'");
  }
  auto allreduce_raw = [&](at::Tensor& t) {
    ::gloo::AllreduceOptions opts(context);
    opts.setOutput(t.data_ptr<float>(), static_cast<size_t>(t.numel()));
    opts.setReduceFunction(
        [](void* c, const void* a, const void* b, size_t n) { ::gloo::sum<float>(c, a, b, n); });
    ::gloo::allreduce(opts);
  };

  const torch::Tensor a = compute > 0 ? torch::rand({compute, compute}) : torch::Tensor();
  auto work_between = [&] {
    if (compute > 0) (void)torch::mm(a, a);
  };

  for (const auto bytes : sizes) {
    std::vector<at::Tensor> tensors{torch::zeros({bytes / 4})};
    for (int i = 0; i < warmup; ++i) pg->allreduce(tensors)->wait();
    pg->barrier()->wait();
    std::vector<double> us;
    if (issue == "async") {
      for (int done = 0; done < iters; done += outstanding) {
        std::vector<std::vector<at::Tensor>> bufs(outstanding,
                                                  std::vector<at::Tensor>{torch::zeros({bytes / 4})});
        work_between();
        const auto t0 = Clock::now();
        std::vector<decltype(pg->allreduce(bufs[0]))> works;
        for (int k = 0; k < outstanding; ++k) works.push_back(pg->allreduce(bufs[k]));
        for (auto& w : works) w->wait();
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / outstanding);
      }
    } else {
      for (int i = 0; i < iters; ++i) {
        work_between();
        if (issue == "barrier") pg->barrier()->wait();
        const auto t0 = Clock::now();
        if (context) {
          allreduce_raw(tensors[0]);
        } else {
          pg->allreduce(tensors)->wait();
        }
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    }
    // The slowest rank's median: the job waits for it.
    // Rank 0's spread shows whether a median hides a bimodal distribution (scheduler ticks).
    std::vector<double> sorted = us;
    std::sort(sorted.begin(), sorted.end());
    const double p10 = sorted[sorted.size() / 10];
    const double p90 = sorted[sorted.size() * 9 / 10];
    std::vector<at::Tensor> med{torch::tensor({bench::median(us)}, torch::kFloat64)};
    pg->allreduce(med, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
    if (rank == 0) {
      std::printf(
          "gloo_latency impl=%s threads=%d device=%s issue=%s omp=%d compute=%d bytes=%s median_us=%.1f "
          "p10_us=%.1f p90_us=%.1f\n",
          impl.c_str(), threads, device.c_str(), issue.c_str(), at::get_num_threads(), compute,
          bench::human_bytes(bytes).c_str(), med[0][0].item<double>(), p10, p90);
      std::fflush(stdout);
    }
  }
  pg->barrier()->wait();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gloo_latency: error: %s\n", e.what());
  return 1;
}
