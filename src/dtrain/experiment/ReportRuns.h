// The report's model of the runs it shows: what each run's results.json and metrics.jsonl say, read
// once into plain structs, so that the tables and the figures are pure functions of it (and can be
// tested with hand-made runs).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::experiment {

// What the report uses of a run's results.json; fields the file lacks keep these defaults.
struct RunResults {
  std::string model;     // model
  std::string strategy;  // strategy
  // The strategy as the throughput table tells runs apart: its name and, where its options have one,
  // its stage ("zero stage 3", "data_parallel").
  std::string layout;
  std::string backend;             // backend
  std::string precision = "fp32";  // precision, and data_parallel's wire compression (", fp16 wire")
  int world_size = 1;              // world_size: workers
  std::int64_t steps = 1;          // steps: optimizer steps (per-step figures divide by at least 1)
  int epochs = 1;                  // epochs completed
  int batch_size = 0;              // config.data.batch_size: per worker
  double top1 = 0;                 // final.top1: the final evaluation
  double top5 = 0;                 // final.top5
  double loss = 0;                 // final.loss
  // final.mcc: Matthews correlation (CoLA's metric); none in results written before it was kept.
  std::optional<double> mcc;
  double samples_per_second = 0;  // samples_per_second: the whole job's training throughput
  double train_seconds = 0;       // train_seconds: training time without evaluation
  // step_time.comm_s x steps: the training steps' communication phase over the run (results
  // written before step_time existed: comm_wait_seconds). The report's "comm ms/step"; not
  // comm.total.wait_seconds, which counts every wait on the strategy's collectives.
  double comm_wait_seconds = 0;
  double comm_bytes = 0;  // comm.total.bytes: bytes each rank handed to collectives
  // strategy_metrics.node_bytes_sent: what each graph node sent its neighbours over the run (mean
  // over nodes), whichever rank hosts it; none for a strategy that does not count node traffic. Nodes
  // on one rank exchange in memory, so comm_bytes leaves their traffic out.
  std::optional<double> node_bytes_sent;
  // Beside the model, which one-worker runs this run's scaling efficiency may be measured against
  // (Note [The scaling reference] in ReportTables.h): "" for a strategy that computes one process's
  // mathematics (parallel::StrategyInfo::exact) or for results that name no strategy; otherwise the
  // strategy and, where its options name one, its algorithm ("decentralized cadmm").
  std::string kind;
  // step_time: the per-step mean of the training step's phases, in seconds; absent from results
  // written before the split existed.
  struct StepSplit {
    double forward = 0, backward = 0, communication = 0, update = 0;
  };
  std::optional<StepSplit> step_time;
  double bytes_per_step = 0;  // bytes_per_step: what the training step's algorithm put on the wire
};

// One line of metrics.jsonl: its numeric fields ("step", "epoch", "wall_time", "train/loss",
// "val/top1", ...). Fields that are null or not numbers are left out.
using MetricRecord = std::map<std::string, double>;

struct ReportRun {
  std::string name;
  RunResults results;
  std::vector<MetricRecord> metrics;  // metrics.jsonl, in file order
};

// The fields of a results.json document the report uses.
RunResults parse_run_results(const nlohmann::json& results);

// metrics.jsonl's records; none when the file does not exist. Throws std::runtime_error naming
// file:line for a line that is not a JSON object.
std::vector<MetricRecord> read_metrics(const std::filesystem::path& path);

// The run in run_dir (results.json and metrics.jsonl), shown under `name`.
ReportRun read_run(const std::string& name, const std::filesystem::path& run_dir);

// The runs of a run folder (one) or of a finished experiment folder (every run its results.json
// lists, in that order). Throws std::invalid_argument when dir holds neither, and
// std::runtime_error naming the file when a results.json is missing or not valid JSON.
std::vector<ReportRun> read_report_runs(const std::filesystem::path& dir);

}  // namespace dtrain::experiment
