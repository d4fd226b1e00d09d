// `dtrain bench comm`: times one collective over a list of sizes, as nccl-tests does, on any
// backend. With --nproc it starts the workers itself (launch::launch re-running this binary);
// otherwise it is one worker of a job started by torchrun, mpirun, srun or `dtrain launch`.
#include "dtrain/cli/BenchCommand.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dtrain/cli/BenchData.h"
#include "dtrain/cli/BenchThroughput.h"
#include "dtrain/cli/Commands.h"
#include "dtrain/comm/Backend.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/config/Environment.h"
#include "dtrain/launch/Launcher.h"
#include "dtrain/run/SelfExe.h"
#include "dtrain/util/Clock.h"
#include "dtrain/util/EnumNames.h"

namespace dtrain::cli {

namespace {

const std::vector<std::string> kOps{"allreduce", "allgather", "broadcast", "reduce_scatter", "sendrecv"};

constexpr util::EnumNames<at::ScalarType, 4> kDtypeNames{
    {{{at::kFloat, "float32"}, {at::kDouble, "float64"}, {at::kInt, "int32"}, {at::kLong, "int64"}}}};

at::ScalarType parse_dtype(const std::string& name) {
  try {
    return kDtypeNames.parse(name, "element type");
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--dtype: ") + e.what());
  }
}

std::invalid_argument bad_size(const std::string& item) {
  return std::invalid_argument(
      fmt::format("--sizes: '{}' is not a size; expected positive numbers with an optional K, M or G suffix "
                  "(powers of 1024), separated by commas, e.g. --sizes 4K,1M,16M",
                  item));
}

// The worker's command line: the launcher's own arguments without --nproc.
std::vector<std::string> worker_command(const BenchCommOptions& o) {
  return {run::self_executable(),
          "bench",
          "comm",
          "--backend",
          o.backend,
          "--op",
          o.op,
          "--sizes",
          o.sizes,
          "--iters",
          std::to_string(o.iters),
          "--warmup",
          std::to_string(o.warmup),
          "--threads",
          std::to_string(o.threads),
          "--dtype",
          o.dtype};
}

int run_launcher(const BenchCommOptions& o) {
  launch::LaunchOptions options;
  options.nproc_per_node = o.nproc;
  options.oversubscribe = o.oversubscribe;
  options.backend = o.backend;
  options.threads = o.threads;
  options.command = worker_command(o);
  options.environment = config::process_environment();
  const launch::LaunchResult result = launch::launch(options);
  if (result.signal) return 128 + *result.signal;
  return result.exit_code;
}

int run_worker(const BenchCommOptions& o) {
  if (o.threads > 0) at::set_num_threads(o.threads);
  const comm::RendezvousInfo rendezvous = comm::resolve_rendezvous({}, config::process_environment());
  comm::BackendOptions backend;
  backend.name = o.backend;
  const auto communicator = comm::connect(backend, rendezvous);
  std::vector<BenchCommResult> results;
  for (const std::int64_t bytes : parse_sizes(o.sizes)) {
    results.push_back(measure(*communicator, o, bytes));
    if (communicator->rank() == 0) std::cout << to_json_line(results.back()) << std::endl;
  }
  if (communicator->rank() == 0) print_table(std::cerr, results);
  communicator->barrier();
  return kExitSuccess;
}

}  // namespace

std::vector<std::int64_t> parse_sizes(const std::string& list) {
  std::vector<std::int64_t> sizes;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, comma - start);
    start = comma + 1;
    std::string text = item;
    if (!text.empty() && (text.back() == 'B' || text.back() == 'b')) text.pop_back();
    std::int64_t scale = 1;
    if (!text.empty()) {
      switch (std::toupper(static_cast<unsigned char>(text.back()))) {
        case 'K':
          scale = 1LL << 10;
          break;
        case 'M':
          scale = 1LL << 20;
          break;
        case 'G':
          scale = 1LL << 30;
          break;
        default:
          break;
      }
      if (scale != 1) text.pop_back();
    }
    if (text.empty() ||
        !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }) ||
        text.size() > 12) {
      throw bad_size(item);
    }
    const std::int64_t value = std::stoll(text) * scale;
    if (value <= 0) throw bad_size(item);
    sizes.push_back(value);
  }
  return sizes;
}

double bus_factor(const std::string& op, int world) {
  const double n = world;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "allgather" || op == "reduce_scatter") return (n - 1) / n;
  if (op == "broadcast" || op == "sendrecv") return 1.0;
  throw std::invalid_argument(
      fmt::format("--op: unknown collective '{}'; expected one of {}", op, fmt::join(kOps, ", ")));
}

void validate(const BenchCommOptions& o) {
  const auto backends = comm::available_backends();
  if (std::find(backends.begin(), backends.end(), o.backend) == backends.end()) {
    throw std::invalid_argument(fmt::format("--backend: '{}' is not in this build; choose one of {}",
                                            o.backend, fmt::join(backends, ", ")));
  }
  bus_factor(o.op, 1);
  parse_sizes(o.sizes);
  parse_dtype(o.dtype);
  if (o.nproc < 0) throw std::invalid_argument(fmt::format("--nproc must be at least 1; found {}", o.nproc));
  if (o.iters < 1) throw std::invalid_argument(fmt::format("--iters must be at least 1; found {}", o.iters));
  if (o.warmup < 0)
    throw std::invalid_argument(fmt::format("--warmup must be at least 0; found {}", o.warmup));
  if (o.threads < 0) {
    throw std::invalid_argument(
        fmt::format("--threads must be at least 0 (0 = cores / workers); found {}", o.threads));
  }
}

BenchCommResult measure(comm::Communicator& comm, const BenchCommOptions& o, std::int64_t bytes) {
  const auto dtype = parse_dtype(o.dtype);
  const int world = comm.size();
  const std::int64_t element = static_cast<std::int64_t>(c10::elementSize(dtype));
  // allgather and reduce_scatter split the buffer into one equal chunk per rank.
  const bool chunked = o.op == "allgather" || o.op == "reduce_scatter";
  const std::int64_t chunk = chunked ? bytes / element / world : bytes / element;
  const std::int64_t numel = chunked ? chunk * world : chunk;
  if (chunk < 1) {
    throw std::invalid_argument(
        fmt::format("--sizes: {} bytes hold less than one {} element per rank for {} on {} "
                    "ranks; use a size of at least {} bytes",
                    bytes, o.dtype, o.op, world, element * (chunked ? world : 1)));
  }
  if (o.op == "sendrecv" && world < 2) {
    throw std::invalid_argument(
        "--op sendrecv exchanges between ranks; run it on at least 2 ranks (--nproc 2)");
  }
  // Zeros stay zeros under a sum, so repeated reductions never overflow or turn denormal.
  const auto opts = at::TensorOptions().dtype(dtype);
  at::Tensor full = at::zeros({numel}, opts);
  at::Tensor part = at::zeros({chunk}, opts);
  // sendrecv, as nccl-tests' sendrecv_perf: every rank sends its buffer to the next rank and
  // receives the previous rank's into another, both posted before either is waited for.
  at::Tensor inbox = o.op == "sendrecv" ? at::zeros({numel}, opts) : at::Tensor();
  const int next = (comm.rank() + 1) % world;
  const int previous = (comm.rank() + world - 1) % world;
  auto call = [&] {
    if (o.op == "sendrecv") {
      auto received = comm.recv(inbox, previous, /*tag=*/0, /*async_op=*/true);
      comm.send(full, next, /*tag=*/0, /*async_op=*/true)->wait();
      received->wait();
    } else if (o.op == "allreduce") {
      comm.allreduce(full);
    } else if (o.op == "allgather") {
      comm.allgather(part, full);
    } else if (o.op == "broadcast") {
      comm.broadcast(full, 0);
    } else {
      comm.reduce_scatter(full, part);
    }
  };

  comm.barrier();
  for (int i = 0; i < o.warmup; ++i) call();
  comm.barrier();
  at::Tensor seconds = at::empty({o.iters}, at::kDouble);
  auto* s = seconds.data_ptr<double>();
  for (int i = 0; i < o.iters; ++i) {
    const auto start = util::Clock::now();
    call();
    s[i] = util::seconds_since(start);
  }
  // An iteration lasts until its slowest rank finishes (nccl-tests' convention).
  comm.allreduce(seconds, comm::ReduceOp::Max);
  const double median = seconds.median().item<double>();

  BenchCommResult r;
  r.op = o.op;
  r.backend = comm.backend();
  r.world = world;
  r.bytes = numel * element;
  r.median_us = median * 1e6;
  r.algbw_GBps = median > 0 ? static_cast<double>(r.bytes) / median / 1e9 : 0.0;
  r.busbw_GBps = r.algbw_GBps * bus_factor(o.op, world);
  return r;
}

std::string to_json_line(const BenchCommResult& r) {
  // Rounded so the line reads well; 0.001 us and 1 MB/s are below any timer's resolution here.
  auto round_to = [](double v, double unit) { return std::round(v / unit) * unit; };
  nlohmann::ordered_json j;
  j["op"] = r.op;
  j["backend"] = r.backend;
  j["world"] = r.world;
  j["bytes"] = r.bytes;
  j["median_us"] = round_to(r.median_us, 0.001);
  j["algbw_GBps"] = round_to(r.algbw_GBps, 0.001);
  j["busbw_GBps"] = round_to(r.busbw_GBps, 0.001);
  return j.dump();
}

void print_table(std::ostream& out, const std::vector<BenchCommResult>& results) {
  out << fmt::format("{:>15} {:>8} {:>6} {:>12} {:>12} {:>11} {:>11}\n", "op", "backend", "world", "bytes",
                     "median_us", "algbw_GB/s", "busbw_GB/s");
  for (const auto& r : results) {
    out << fmt::format("{:>15} {:>8} {:>6} {:>12} {:>12.1f} {:>11.3f} {:>11.3f}\n", r.op, r.backend, r.world,
                       r.bytes, r.median_us, r.algbw_GBps, r.busbw_GBps);
  }
  out.flush();
}

namespace {

// `dtrain bench comm`, its flags bound to `o`.
CLI::App* add_comm_subcommand(CLI::App& bench, BenchCommOptions& o) {
  auto* cmd = bench.add_subcommand("comm",
                                   "Time a collective over sizes (median over iterations, slowest rank "
                                   "per iteration); rank 0 prints one JSON "
                                   "object per size on stdout and a table on stderr");
  cmd->add_option("--backend", o.backend, "Communication backend: gloo | mpi")->capture_default_str();
  cmd->add_option("--nproc", o.nproc,
                  "Start this many local workers (mpi: through mpirun); without it, join a job from the "
                  "environment (torchrun, mpirun, srun, dtrain launch)");
  cmd->add_flag("--oversubscribe", o.oversubscribe,
                "Start more local workers than 4 per core (at least 16), the bound without it");
  cmd->add_option(
         "--op", o.op,
         "allreduce | allgather | broadcast | reduce_scatter | sendrecv (each rank sends to the next "
         "and receives from the previous at once)")
      ->capture_default_str();
  cmd->add_option("--sizes", o.sizes, "Comma-separated sizes in bytes; K, M, G are powers of 1024")
      ->capture_default_str();
  cmd->add_option("--iters", o.iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed iterations per size")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Intra-op threads per worker (0 = cores / workers)")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "float32 | float64 | int32 | int64")->capture_default_str();
  return cmd;
}

// `dtrain bench data`, its flags bound to `o`.
CLI::App* add_data_subcommand(CLI::App& bench, BenchDataOptions& o) {
  auto* cmd = bench.add_subcommand(
      "data",
      "Time the data pipeline against threads: loader batches from an in-memory set, and reading and "
      "decoding an image folder; one JSON object per measurement on stdout and a table on stderr");
  cmd->add_option("--dataset", o.dataset, "In-memory data set (data.dataset)")->capture_default_str();
  cmd->add_option("--root", o.root, "Its data.root (default: the data set's own)");
  cmd->add_option("--image-folder", o.image_folder, "An image folder (class subfolders) to time too");
  cmd->add_option("--export", o.export_images,
                  "Write this many images of the in-memory set into --image-folder as PNGs first, when "
                  "the folder does not exist");
  cmd->add_option("--image-size", o.image_size, "Image folder: resize to this square")->capture_default_str();
  cmd->add_option("--threads", o.threads, "Comma-separated thread counts")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--batches", o.batches, "Timed batches per thread count")->capture_default_str();
  cmd->add_flag("--augment,!--no-augment", o.augment, "Random crop and flip, as in training")
      ->capture_default_str();
  cmd->add_option("--plot", o.plot, "Draw samples/s against threads into this PNG (gnuplot)");
  return cmd;
}

// Runs `dtrain bench data`: one JSON line per measurement on stdout, the table on stderr.
int run_data_command(const BenchDataOptions& o) {
  const auto results = run_data_benchmark(o);
  for (const auto& r : results) std::cout << to_json_line(r) << std::endl;
  std::cerr << fmt::format("{:<14} {:<28} {:>8} {:>10} {:>14}\n", "source", "dataset", "threads", "samples",
                           "samples/s");
  for (const auto& r : results) {
    std::cerr << fmt::format("{:<14} {:<28} {:>8} {:>10} {:>14.0f}\n", r.source, r.dataset, r.threads,
                             r.samples, r.samples_per_second);
  }
  if (!o.plot.empty()) std::cerr << "plot: " << o.plot << "\n";
  return kExitSuccess;
}

}  // namespace

Run add_bench_command(CLI::App& app) {
  auto* bench =
      app.add_subcommand("bench",
                         "Benchmarks: `dtrain bench comm` times collectives, `dtrain bench data` the data "
                         "pipeline, `dtrain bench "
                         "throughput` training over models, batches, precisions, workers and strategies");
  bench->require_subcommand(1);
  auto options = std::make_shared<BenchCommOptions>();
  auto* comm_cmd = add_comm_subcommand(*bench, *options);
  auto data = std::make_shared<BenchDataOptions>();
  auto* data_cmd = add_data_subcommand(*bench, *data);
  auto throughput = std::make_shared<BenchThroughputOptions>();
  auto* throughput_cmd = add_throughput_subcommand(*bench, *throughput);
  return [options, comm_cmd, data, data_cmd, throughput, throughput_cmd]() -> int {
    if (data_cmd->parsed()) return run_data_command(*data);
    if (throughput_cmd->parsed()) return run_throughput_command(*throughput);
    if (!comm_cmd->parsed()) {
      throw std::invalid_argument("bench: expected a benchmark name: comm, data or throughput");
    }
    validate(*options);
    return options->nproc > 0 ? run_launcher(*options) : run_worker(*options);
  };
}

}  // namespace dtrain::cli
