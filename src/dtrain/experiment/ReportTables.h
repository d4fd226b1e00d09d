// The report's numbers and tables: scaling efficiency and communication per step for each run, the
// table of every run, and the Horovod/FSDP/pipeline study's throughput table (model x batch against
// precision x workers).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/experiment/ReportRuns.h"

namespace dtrain::experiment {

// Rows of cells, the first row the header; rendered as Markdown or HTML by ReportPage.h.
using Table = std::vector<std::vector<std::string>>;

// Model -> the best samples/s among that model's one-worker runs (models without one are absent).
std::map<std::string, double> one_worker_throughput(const std::vector<ReportRun>& runs);

// samples_per_second / (workers x one_worker): 1 is perfect scaling. 0 when one_worker is 0.
double scaling_efficiency(double samples_per_second, int workers, double one_worker);

// The run's scaling efficiency against the best one-worker run of its model; none without one.
std::optional<double> scaling_efficiency(const RunResults& run,
                                         const std::map<std::string, double>& one_worker);

// MB each rank handed to collectives per optimizer step (1e6 bytes; steps counted as at least 1).
double comm_mb_per_step(const RunResults& run);

// Milliseconds per optimizer step blocked on communication (steps counted as at least 1).
double comm_wait_ms_per_step(const RunResults& run);

// The distinct worker counts of the runs.
std::vector<int> worker_counts(const std::vector<ReportRun>& runs);

// One row per run: run, strategy, backend, workers, model, steps, test top-1, test top-5, test
// loss, samples/s, scaling eff., payload MB/step (the bytes of the tensors each rank handed to its
// communication, both ways: an all-reduce's buffer once, a send and a receive each), wait ms/step.
Table run_table(const std::vector<ReportRun>& runs);

// Note [Scaling efficiency above 1]
// N workers cannot do more than N times what one worker does alone on the same host, so an efficiency
// above 1 says the one-worker reference is not a fair one: it trained with another batch per worker or
// another precision (the reference is the fastest one-worker run of the model), or it ran slower than
// one worker of this run (a host busy with other work while it ran, or fewer threads). One line per
// such run, naming the reference and which of these holds; empty when none is above 1.
std::vector<std::string> scaling_warnings(const std::vector<ReportRun>& runs);

// The dAD paper's table, one row per run with a step time split: run, strategy, model, test top-1, sent
// KB/step (what this rank's algorithms put on the wire), and ms per step in forward, backward, communication,
// update and their sum.
Table step_table(const std::vector<ReportRun>& runs);

// Some run's results carry the step time split.
bool shows_step_table(const std::vector<ReportRun>& runs);

// The Horovod/FSDP/pipeline study's table: rows model x batch per worker (sorted), columns precision x
// workers (sorted), cells the best samples/s of the runs there, empty where no run is.
Table throughput_table(const std::vector<ReportRun>& runs);

// The throughput table compares something: several model x batch rows, or several worker counts.
bool shows_throughput_table(const std::vector<ReportRun>& runs);

}  // namespace dtrain::experiment
