// `dtrain bench comm`: the collective-communication benchmark, in the manner of nccl-tests.
// The pieces here (sizes, bus-bandwidth factors, one measurement) are what the command runs and
// what its tests check; the command itself is registered by add_bench_command (Commands.h).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace dtrain::comm {
class Communicator;
}

namespace dtrain::cli {

struct BenchCommOptions {
  std::string backend = "gloo";  // gloo | mpi (| nccl where built)
  int nproc = 0;                 // > 0: start this many local workers; 0: this process is a worker
  bool oversubscribe = false;    // launch::LaunchOptions::oversubscribe
  std::string op = "allreduce";  // allreduce | allgather | broadcast | reduce_scatter | sendrecv
  std::string sizes = "4K,1M,16M,64M";
  int iters = 20;
  int warmup = 5;
  int threads = 0;  // intra-op threads per worker; 0 = cores / workers
  std::string dtype = "float32";
};

// One line of the benchmark's output. bytes is nccl-tests' "size": the buffer each rank hands
// to allreduce and broadcast, allgather's output, reduce_scatter's input, and what each rank
// sends (and receives) in sendrecv.
struct BenchCommResult {
  std::string op;
  std::string backend;
  int world = 1;
  std::int64_t bytes = 0;
  double median_us = 0.0;
  double algbw_GBps = 0.0;
  double busbw_GBps = 0.0;
};

// "4K,1M,16M" -> {4096, 1048576, 16777216}: K, M and G are powers of 1024, a trailing B is
// allowed. Throws std::invalid_argument naming the malformed item.
std::vector<std::int64_t> parse_sizes(const std::string& list);

// nccl-tests' bus-bandwidth factor: allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n,
// broadcast and sendrecv 1. Throws std::invalid_argument for an unknown op.
double bus_factor(const std::string& op, int world);

// Checks the options a user gave; throws std::invalid_argument saying what to change.
void validate(const BenchCommOptions& options);

// Measures one size on every rank of `comm` (collective: all ranks call it with the same
// arguments): barrier, warm-up, then iters timed calls; each call's time is the slowest rank's.
// bytes is rounded down to a whole number of elements per rank.
BenchCommResult measure(comm::Communicator& comm, const BenchCommOptions& options, std::int64_t bytes);

// {"op":...,"backend":...,"world":...,"bytes":...,"median_us":...,"algbw_GBps":...,"busbw_GBps":...}
std::string to_json_line(const BenchCommResult& result);
// The readable table: a header, then one row per result.
void print_table(std::ostream& out, const std::vector<BenchCommResult>& results);

}  // namespace dtrain::cli
