// The gloo latency study: plain c10d ProcessGroupGloo all-reduce, no dtrain code, under the
// variants that decide small-message latency on a few shared cores: worker threads, device
// (hostname, loopback interface), how calls are issued (wait each, barrier before each, many
// outstanding) and optional OpenMP compute between calls. Start one process per rank with
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set, e.g. for r in 1 0; do RANK=$r WORLD_SIZE=2
// MASTER_ADDR=127.0.0.1 MASTER_PORT=29621 build/bench/gloo_latency --sizes 4K & done; wait
#include <ATen/Parallel.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "BenchCommon.h"
#include "dtrain/util/Clock.h"

namespace {

using dtrain::util::Clock;
using Group = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

struct LatencyOptions {
  int rank = 0;
  int world = 1;
  std::string addr;
  int port = 0;
  int threads = 2;
  std::string device;
  std::string issue;  // wait | barrier | async
  // c10d: ProcessGroupGloo (work queue + worker threads); gloo: gloo::allreduce on the calling
  // thread over its own context, which isolates the cost of c10d's thread hand-offs.
  std::string impl;
  int iters = 200;
  int warmup = 20;
  int outstanding = 8;
  int compute = 0;  // matmul side between calls, 0 = none
  std::vector<std::int64_t> sizes;
};

LatencyOptions parse_options(int argc, char** argv) {
  const bench::Flags flags(argc, argv);
  LatencyOptions o;
  o.rank = std::stoi(bench::env_or("RANK", "0"));
  o.world = std::stoi(bench::env_or("WORLD_SIZE", "1"));
  o.addr = bench::env_or("MASTER_ADDR", "127.0.0.1");
  o.port = std::stoi(bench::env_or("MASTER_PORT", "29500"));
  o.threads = flags.get_int("threads", 2);  // c10d's default
  o.device = flags.get("device", "default");
  o.issue = flags.get("issue", "wait");
  o.impl = flags.get("impl", "c10d");
  o.iters = flags.get_int("iters", 200);
  o.warmup = flags.get_int("warmup", 20);
  o.outstanding = flags.get_int("outstanding", 8);
  o.compute = flags.get_int("compute", 0);
  o.sizes = bench::parse_sizes(flags.get("sizes", "4K,1M"));
  if (o.impl != "c10d" && o.impl != "gloo") {
    throw std::invalid_argument("--impl: expected c10d or gloo; got '" + o.impl + "'");
  }
  return o;
}

std::shared_ptr<::gloo::transport::Device> make_device(const std::string& kind) {
  if (kind == "default") return c10d::ProcessGroupGloo::createDefaultDevice();
  if (kind == "lo") return c10d::ProcessGroupGloo::createDeviceForInterface("lo");
  if (kind == "hostname") return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  throw std::invalid_argument("--device: expected default, lo or hostname; got '" + kind + "'");
}

c10::intrusive_ptr<c10d::Store> make_store(const LatencyOptions& o) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(o.port);
  store_options.isServer = o.rank == 0;
  store_options.numWorkers = o.world;
  return c10::make_intrusive<c10d::TCPStore>(o.addr, store_options);
}

Group make_group(const LatencyOptions& o, const c10::intrusive_ptr<c10d::Store>& store) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->threads = o.threads;
  options->devices.push_back(make_device(o.device));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world, options);
}

// --impl gloo: a raw Gloo context beside the group, meeting under its own store prefix.
std::shared_ptr<::gloo::rendezvous::Context> make_raw_context(const LatencyOptions& o,
                                                              const c10::intrusive_ptr<c10d::Store>& store) {
  auto context = std::make_shared<::gloo::rendezvous::Context>(o.rank, o.world);
  c10d::ProcessGroupGloo::GlooStore gloo_store(c10::make_intrusive<c10d::PrefixStore>("raw", store));
  auto device = make_device(o.device);
  context->connectFullMesh(gloo_store, device);
  return context;
}

void raw_allreduce(const std::shared_ptr<::gloo::rendezvous::Context>& context, at::Tensor& t) {
  ::gloo::AllreduceOptions opts(context);
  opts.setOutput(t.data_ptr<float>(), static_cast<size_t>(t.numel()));
  opts.setReduceFunction(
      [](void* c, const void* a, const void* b, size_t n) { ::gloo::sum<float>(c, a, b, n); });
  ::gloo::allreduce(opts);
}

double micros_since(Clock::time_point start) {
  return dtrain::util::seconds_since(start) * 1e6;
}

// --issue async: `outstanding` all-reduces in flight, then all waited; the time per call.
std::vector<double> time_async(const LatencyOptions& o, const Group& pg, std::int64_t bytes,
                               const std::function<void()>& work_between) {
  std::vector<double> us;
  for (int done = 0; done < o.iters; done += o.outstanding) {
    std::vector<std::vector<at::Tensor>> bufs(o.outstanding,
                                              std::vector<at::Tensor>{torch::zeros({bytes / 4})});
    work_between();
    const auto t0 = Clock::now();
    std::vector<decltype(pg->allreduce(bufs[0]))> works;
    for (int k = 0; k < o.outstanding; ++k) works.push_back(pg->allreduce(bufs[k]));
    for (auto& w : works) w->wait();
    us.push_back(micros_since(t0) / o.outstanding);
  }
  return us;
}

// --issue wait or barrier: one call at a time, waited (after a barrier when asked).
std::vector<double> time_each(const LatencyOptions& o, const Group& pg,
                              const std::shared_ptr<::gloo::rendezvous::Context>& context,
                              std::vector<at::Tensor>& tensors, const std::function<void()>& work_between) {
  std::vector<double> us;
  for (int i = 0; i < o.iters; ++i) {
    work_between();
    if (o.issue == "barrier") pg->barrier()->wait();
    const auto t0 = Clock::now();
    if (context) {
      raw_allreduce(context, tensors[0]);
    } else {
      pg->allreduce(tensors)->wait();
    }
    us.push_back(micros_since(t0));
  }
  return us;
}

// One line from rank 0: the slowest rank's median (the job waits for it), and rank 0's spread,
// which shows whether a median hides a bimodal distribution (scheduler ticks).
void report(const LatencyOptions& o, const Group& pg, std::int64_t bytes, const std::vector<double>& us) {
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  const double p10 = sorted[sorted.size() / 10];
  const double p90 = sorted[sorted.size() * 9 / 10];
  std::vector<at::Tensor> med{torch::tensor({bench::median(us)}, torch::kFloat64)};
  pg->allreduce(med, c10d::AllreduceOptions{c10d::ReduceOp::MAX})->wait();
  if (o.rank != 0) return;
  std::printf(
      "gloo_latency impl=%s threads=%d device=%s issue=%s omp=%d compute=%d bytes=%s median_us=%.1f "
      "p10_us=%.1f p90_us=%.1f\n",
      o.impl.c_str(), o.threads, o.device.c_str(), o.issue.c_str(), at::get_num_threads(), o.compute,
      bench::human_bytes(bytes).c_str(), med[0][0].item<double>(), p10, p90);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  const LatencyOptions o = parse_options(argc, argv);
  const auto store = make_store(o);
  const Group pg = make_group(o, store);
  const auto context = o.impl == "gloo" ? make_raw_context(o, store) : nullptr;
  const torch::Tensor a = o.compute > 0 ? torch::rand({o.compute, o.compute}) : torch::Tensor();
  auto work_between = [&] {
    if (o.compute > 0) (void)torch::mm(a, a);
  };
  for (const auto bytes : o.sizes) {
    std::vector<at::Tensor> tensors{torch::zeros({bytes / 4})};
    for (int i = 0; i < o.warmup; ++i) pg->allreduce(tensors)->wait();
    pg->barrier()->wait();
    const auto us = o.issue == "async" ? time_async(o, pg, bytes, work_between)
                                       : time_each(o, pg, context, tensors, work_between);
    report(o, pg, bytes, us);
  }
  pg->barrier()->wait();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "gloo_latency: error: %s\n", e.what());
  return 1;
}
