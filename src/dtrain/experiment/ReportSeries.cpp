// The report's series as points, computed from the runs alone; ReportFigures.cpp writes them out
// for gnuplot.
#include "dtrain/experiment/ReportSeries.h"

#include <algorithm>
#include <map>

#include "dtrain/experiment/ReportTables.h"

namespace dtrain::experiment {
namespace {

double field(const MetricRecord& record, const std::string& key) {
  const auto it = record.find(key);
  return it == record.end() ? 0.0 : it->second;
}

// One series' points from the best (highest throughput, shortest time) run at each worker count.
ScalingSeries series_scaling(const std::vector<ReportRun>& runs, const std::string& key, double one_worker) {
  std::map<int, double> best_rate, best_time;  // workers -> samples/s, seconds
  std::string model;
  for (const auto& run : runs) {
    const auto& r = run.results;
    if (scaling_series_key(r) != key) continue;
    model = r.model;
    auto& rate = best_rate[r.world_size];
    rate = std::max(rate, r.samples_per_second);
    const auto it = best_time.find(r.world_size);
    if (r.train_seconds > 0 && (it == best_time.end() || r.train_seconds < it->second)) {
      best_time[r.world_size] = r.train_seconds;
    }
  }
  ScalingSeries series;
  series.model = model;
  series.key = key;
  for (const auto& [w, rate] : best_rate) {
    series.throughput.push_back({static_cast<double>(w), rate});
    series.efficiency.push_back(scaling_efficiency(rate, w, one_worker));
    series.ideal.push_back({static_cast<double>(w), w * one_worker});
  }
  const double one_worker_time = best_time.count(1) ? best_time[1] : 0.0;
  for (const auto& [w, t] : best_time) {
    series.time.push_back({static_cast<double>(w), t});
    if (one_worker_time > 0) series.ideal_time.push_back({static_cast<double>(w), one_worker_time / w});
  }
  return series;
}

}  // namespace

std::vector<Point> learning_curve(const ReportRun& run, const std::string& x_key, const std::string& y_key) {
  std::vector<Point> points;
  const bool since_start = x_key == "wall_time";
  const double t0 = since_start && !run.metrics.empty() ? field(run.metrics.front(), "wall_time") : 0.0;
  for (const auto& record : run.metrics) {
    const auto y = record.find(y_key);
    if (y == record.end()) continue;
    points.push_back({field(record, x_key) - t0, y->second});
  }
  return points;
}

std::vector<Point> node_mean_curve(const ReportRun& run, const std::string& x_key, const std::string& prefix,
                                   const std::string& suffix) {
  std::vector<Point> points;
  for (const auto& record : run.metrics) {
    double sum = 0;
    int nodes = 0;
    for (auto y = record.find(prefix + "0" + suffix); y != record.end();
         y = record.find(prefix + std::to_string(nodes) + suffix)) {
      sum += y->second;
      ++nodes;
    }
    // A decentralized run whose nodes share one model (centralized) evaluates that model alone:
    // its curve is the model's (val/<suffix>) or a consensus error of 0.
    if (nodes == 0 && record.count("strategy/node_bytes_sent") && record.count("strategy/consensus_error")) {
      const auto shared =
          prefix == "val/node" ? record.find("val" + suffix) : record.find("strategy/consensus_error");
      if (shared != record.end()) points.push_back({field(record, x_key), shared->second});
    }
    if (nodes > 0) points.push_back({field(record, x_key), sum / nodes});
  }
  return points;
}

bool has_node_metrics(const std::vector<ReportRun>& runs) {
  for (const auto& run : runs) {
    for (const auto& record : run.metrics) {
      if (record.count("val/node0/loss")) return true;
    }
  }
  return false;
}

std::vector<ScalingSeries> scaling_series(const std::vector<ReportRun>& runs) {
  std::vector<ScalingSeries> out;
  for (const auto& [key, one_worker] : one_worker_throughput(runs)) {
    out.push_back(series_scaling(runs, key, one_worker));
  }
  return out;
}

std::vector<CommBar> comm_bars(const std::vector<ReportRun>& runs) {
  std::vector<CommBar> bars;
  for (const auto& run : runs) {
    bars.push_back({run.name + " (" + run.results.strategy + ")", comm_mb_per_step(run.results),
                    comm_wait_ms_per_step(run.results)});
  }
  return bars;
}

}  // namespace dtrain::experiment
