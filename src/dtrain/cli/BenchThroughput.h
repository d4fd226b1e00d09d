// `dtrain bench throughput`: the distributed-training study's comparison — samples/s over model x batch x
// precision x workers x strategy — where every point is a short real training run (the Trainer and the
// Strategy users run) in fresh worker processes, which also report their peak resident memory and
// the bytes their strategy holds in parameters, gradients and optimizer state.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/experiment/Experiment.h"

namespace dtrain::config {
struct GridModelKeys;
}

namespace CLI {
class App;
}

namespace dtrain::cli {

struct BenchThroughputOptions {
  std::string models = "resnet18";  // comma lists: every combination is one point
  std::string batches = "32";       // data.batch_size, per worker
  std::string precisions = "fp32";  // train.precision
  std::string workers = "1,2";
  std::string strategies = "data_parallel";  // parallel.strategy, any registered name
  int steps = 20;                            // timed steps per point
  int warmup = 5;                            // untimed steps before them
  std::vector<std::string> set;              // key=value overrides for every point's configuration
  std::string json;                          // JSON lines into this file ("" = stdout)
  std::string markdown;                      // the tables into this file too ("" = stderr only)
  // Internal: this process is one worker of one point and writes its report into this folder.
  std::string worker_out;
};

// One configuration of the sweep, its names canonical (registered names, not aliases).
struct ThroughputPoint {
  std::string model;
  int batch = 0;
  std::string precision;
  int workers = 1;
  std::string strategy;
};

// What one rank held: peak resident set (getrusage's ru_maxrss) and Strategy::memory_footprint().
struct RankMemory {
  int rank = 0;
  std::uint64_t peak_rss_bytes = 0;
  std::uint64_t parameters_bytes = 0;
  std::uint64_t gradients_bytes = 0;
  std::uint64_t optimizer_bytes = 0;
  // The peak the run predicted before its first step (parallel/MemoryPlan.h); 0 where its strategy
  // predicts nothing.
  std::uint64_t planned_peak_bytes = 0;
};

struct ThroughputResult {
  ThroughputPoint point;
  std::string status = "ok";  // ok | refused (the strategy or configuration said no) | failed
  std::string reason;         // one line, when not ok
  int steps = 0;
  int warmup = 0;
  std::int64_t parameters = 0;      // the model's scalar parameters (Psi)
  double samples_per_second = 0.0;  // timed steps' samples over the sum of their slowest-rank times
  double step_ms = 0.0;             // mean slowest-rank time per timed step
  std::vector<RankMemory> ranks;    // by rank
};

// "a,b,c" -> {"a", "b", "c"}; throws std::invalid_argument naming `flag` for an empty item.
std::vector<std::string> parse_name_list(const std::string& flag, const std::string& list);
// "32,64" -> {32, 64}; throws std::invalid_argument naming `flag` for an item that is not a whole
// number of at least 1.
std::vector<int> parse_count_list(const std::string& flag, const std::string& list);

// Checks every option and expands the sweep in the order model, batch, precision, workers,
// strategy (the last varying fastest). Throws std::invalid_argument saying what to change: unknown
// models and strategies list the registered names, more workers than this host runs
// (launch::check_local_workers) are refused, an override of a key the sweep sets names the
// flag to use, an override of a strategy section no swept strategy reads is refused.
std::vector<ThroughputPoint> expand_points(const BenchThroughputOptions& options);

// The run configuration of one point: synthetic data in the model's input shape (3x32x32 for
// resnet, vit and transformer, 1x28x28 otherwise), enough of it for warm-up and timed steps in one
// epoch, SGD with momentum 0.9, no evaluation or checkpoints between steps, then --set on top.
// point_overrides are its dotted overrides (no base file), point_config the configuration they
// make. A --set key of model.* that a point's model does not read is left out of that point, and
// named in `model_keys` (config::load_grid_run_config). Throws ConfigError naming the override where
// one is not valid.
std::vector<std::string> point_overrides(const BenchThroughputOptions& options, const ThroughputPoint& point);
config::RunConfig point_config(const BenchThroughputOptions& options, const ThroughputPoint& point,
                               config::GridModelKeys* model_keys = nullptr);

// The sweep as an experiment: no base file, one run per point in sweep order, named point000,
// point001, ..., its overrides point_overrides.
experiment::ExperimentSpec sweep_experiment(const BenchThroughputOptions& options,
                                            const std::vector<ThroughputPoint>& points);

// Combines the ranks' reports (rank<r>.json in a worker's folder, parsed): samples/s from each
// timed step's slowest rank; refused or failed when any rank says so (the lowest such rank's reason).
ThroughputResult combine_reports(const ThroughputPoint& point, int steps, int warmup,
                                 const std::vector<std::string>& rank_reports);

// {"model":...,"batch":...,"precision":...,"workers":...,"strategy":...,"status":...,["reason":...,]
//  "steps":...,"warmup":...,"parameters":...,"samples_per_second":...,"step_ms":...,
//  "ranks":[{"rank":...,"peak_rss_bytes":...,"parameters_bytes":...,"gradients_bytes":...,
//  "optimizer_bytes":...}]}
std::string to_json_line(const ThroughputResult& result);

// The distributed-training study's table (rows model and batch, a column of samples/s per strategy, precision
// and workers), then one row per point with the memory of each rank.
void write_markdown(std::ostream& out, const std::vector<ThroughputResult>& results);

// The whole sweep: sweep_experiment run by experiment::run_experiment in a scratch folder, each
// point's workers being this binary's (run_throughput_worker), a refused or failed point recorded
// and the next one started; one JSON line per point into `json_out` as it completes, progress on
// `log`. Returns the results in sweep order.
std::vector<ThroughputResult> run_throughput_sweep(const BenchThroughputOptions& options,
                                                   std::ostream& json_out, std::ostream& log);

// One worker of one point (options.worker_out set, one item per list): trains, writes
// rank<r>.json into worker_out. Returns the process exit code (1 when it refused or failed).
int run_throughput_worker(const BenchThroughputOptions& options);

// `dtrain bench throughput`, its flags bound to `options` (add_bench_command registers it), and the
// command itself: the sweep, or one worker of it.
CLI::App* add_throughput_subcommand(CLI::App& bench, BenchThroughputOptions& options);
int run_throughput_command(const BenchThroughputOptions& options);

}  // namespace dtrain::cli
