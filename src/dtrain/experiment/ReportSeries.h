// The series the report's figures draw, as points: a run's learning curves from metrics.jsonl,
// throughput and training time against workers with their ideal lines, and communication per step
// by run.
#pragma once

#include <string>
#include <vector>

#include "dtrain/experiment/ReportRuns.h"

namespace dtrain::experiment {

struct Point {
  double x = 0;
  double y = 0;
};

// (x_key, y_key) of every metrics record that has y_key, in order; x is 0 where a record lacks
// x_key. x_key "wall_time" gives seconds since the run's first record.
std::vector<Point> learning_curve(const ReportRun& run, const std::string& x_key, const std::string& y_key);

// The decentralized strategy's per-node series, averaged over the nodes: for every record that has
// <prefix>0<suffix>, (x_key, mean over i of <prefix><i><suffix> for i = 0, 1, ... while present);
// x as in learning_curve. E.g. ("step", "val/node", "/loss"): mean validation loss by round.
std::vector<Point> node_mean_curve(const ReportRun& run, const std::string& x_key, const std::string& prefix,
                                   const std::string& suffix);

// Whether any run recorded per-node evaluations (val/node0/loss).
bool has_node_metrics(const std::vector<ReportRun>& runs);

// One series' throughput and training time against workers: the runs of one model and one kind of
// training (Note [The scaling reference] in ReportTables.h).
struct ScalingSeries {
  std::string model;
  std::string key;                 // scaling_series_key: the model, with its kind where it has one
  std::vector<Point> throughput;   // (workers, best samples/s), workers ascending
  std::vector<double> efficiency;  // the scaling efficiency of each throughput point
  std::vector<Point> ideal;        // (workers, workers x best one-worker samples/s)
  std::vector<Point> time;         // (workers, shortest training seconds) over runs that recorded one
  std::vector<Point> ideal_time;   // (workers, one worker's training seconds / workers); empty without it
};

// For every series with a one-worker run, in the order of their keys.
std::vector<ScalingSeries> scaling_series(const std::vector<ReportRun>& runs);

// One bar per run: "<run> (<strategy>)" and its communication per step.
struct CommBar {
  std::string label;
  double mb_per_step = 0;
  double wait_ms_per_step = 0;  // comm_wait_ms_per_step: the step's communication phase
};

std::vector<CommBar> comm_bars(const std::vector<ReportRun>& runs);

}  // namespace dtrain::experiment
