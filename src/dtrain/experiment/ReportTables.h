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

// Note [The scaling reference]
// A run's scaling efficiency is its throughput over N times that of the best one-worker run of its
// series: the same model and the same kind of training (RunResults::kind). Strategies that compute one
// process's mathematics (local, data_parallel, zero, pipeline, dad) do on N workers what one worker
// does on N batches, so a one-worker run of any of them is the reference of all of them. A
// decentralized algorithm or rank-dAD does other work per step than one process would (cadmm's
// primal iterations, dsgd's single step): only a one-worker run of the same strategy and algorithm
// is its reference, never one of another algorithm of the same model. A run whose series has no
// one-worker run has no efficiency (an empty cell). Batch and precision stay outside the series: a
// reference that differs in them is named under the table (Note [Scaling efficiency above 1]).

// The series of a run: its model, with its kind where it has one ("mlp", "dinnocnn (decentralized
// cadmm)"). The throughput figure's curves are named after it.
std::string scaling_series_key(const RunResults& run);

// Series -> the best samples/s among that series' one-worker runs (series without one are absent).
std::map<std::string, double> one_worker_throughput(const std::vector<ReportRun>& runs);

// samples_per_second / (workers x one_worker): 1 is perfect scaling. 0 when one_worker is 0.
double scaling_efficiency(double samples_per_second, int workers, double one_worker);

// The run's scaling efficiency against the best one-worker run of its series; none without one.
std::optional<double> scaling_efficiency(const RunResults& run,
                                         const std::map<std::string, double>& one_worker);

// MB each rank handed to collectives per optimizer step (1e6 bytes; steps counted as at least 1).
double comm_mb_per_step(const RunResults& run);

// MB each graph node sent its neighbours per optimizer step (mean over nodes; steps counted as at
// least 1); none for a strategy that does not count node traffic.
std::optional<double> node_sent_mb_per_step(const RunResults& run);

// Milliseconds per optimizer step in the step's communication phase, step_time.comm_s (steps counted
// as at least 1): the run table's "comm ms/step", the step table's "comm ms".
double comm_wait_ms_per_step(const RunResults& run);

// The distinct worker counts of the runs.
std::vector<int> worker_counts(const std::vector<ReportRun>& runs);

// One row per run: run, strategy, backend, workers, model, steps, test top-1, test top-5, test
// loss, samples/s, scaling eff., payload MB/step (the bytes of the tensors each rank handed to its
// communication, both ways: an all-reduce's buffer once, a send and a receive each), then, when
// some run counts node traffic, node sent MB/step (node_sent_mb_per_step; empty for the others),
// then comm ms/step (comm_wait_ms_per_step) and train s.
Table run_table(const std::vector<ReportRun>& runs);

// Note [Scaling efficiency above 1]
// N workers cannot do more than N times what one worker does alone on the same host, so an efficiency
// above 1 says the one-worker reference is not a fair one: it trained with another batch per worker or
// another precision (the reference is the fastest one-worker run of the series), or it ran slower than
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
// workers (sorted), and x strategy (RunResults::layout) where the runs on several workers differ in
// it; cells the best samples/s of the runs there, empty where no run is.
Table throughput_table(const std::vector<ReportRun>& runs);

// The throughput table compares something: several model x batch rows, or several worker counts.
bool shows_throughput_table(const std::vector<ReportRun>& runs);

}  // namespace dtrain::experiment
