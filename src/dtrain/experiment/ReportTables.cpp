// The report's tables and the per-run numbers in them, computed from the runs' results alone.
#include "dtrain/experiment/ReportTables.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace dtrain::experiment {
namespace {

std::int64_t steps_or_one(const RunResults& run) {
  return std::max<std::int64_t>(1, run.steps);
}

// `node_column`: some run of the table counts node traffic (node sent MB/step); `mcc_column`: some
// run reports Matthews correlation.
std::vector<std::string> run_row(const ReportRun& run, const std::map<std::string, double>& one_worker,
                                 bool node_column, bool mcc_column) {
  const auto& r = run.results;
  const auto efficiency = scaling_efficiency(r, one_worker);
  std::vector<std::string> row{run.name, r.strategy, r.backend, std::to_string(r.world_size), r.model};
  row.push_back(std::to_string(steps_or_one(r)));
  for (const double metric : {r.top1, r.top5}) row.push_back(fmt::format("{:.4f}", metric));
  if (mcc_column) row.push_back(r.mcc ? fmt::format("{:.4f}", *r.mcc) : "");
  row.push_back(fmt::format("{:.4f}", r.loss));
  row.push_back(fmt::format("{:.0f}", r.samples_per_second));
  row.push_back(efficiency ? fmt::format("{:.2f}", *efficiency) : "");
  row.push_back(fmt::format("{:.3f}", comm_mb_per_step(r)));
  if (node_column) {
    const auto node_sent = node_sent_mb_per_step(r);
    row.push_back(node_sent ? fmt::format("{:.3f}", *node_sent) : "");
  }
  row.push_back(fmt::format("{:.3f}", comm_wait_ms_per_step(r)));
  // Wall time of training (the distributed-optimizer study compares optimizers by it): without
  // evaluation.
  row.push_back(fmt::format("{:.2f}", r.train_seconds));
  return row;
}

bool reports_mcc(const std::vector<ReportRun>& runs) {
  return std::any_of(runs.begin(), runs.end(),
                     [](const ReportRun& run) { return run.results.mcc.has_value(); });
}

bool counts_node_traffic(const std::vector<ReportRun>& runs) {
  return std::any_of(runs.begin(), runs.end(),
                     [](const ReportRun& run) { return run.results.node_bytes_sent.has_value(); });
}

}  // namespace

std::string scaling_series_key(const RunResults& run) {
  return run.kind.empty() ? run.model : run.model + " (" + run.kind + ")";
}

std::map<std::string, double> one_worker_throughput(const std::vector<ReportRun>& runs) {
  std::map<std::string, double> best;
  for (const auto& run : runs) {
    if (run.results.world_size != 1) continue;
    auto& rate = best[scaling_series_key(run.results)];
    rate = std::max(rate, run.results.samples_per_second);
  }
  return best;
}

double scaling_efficiency(double samples_per_second, int workers, double one_worker) {
  return one_worker > 0 ? samples_per_second / (workers * one_worker) : 0.0;
}

std::optional<double> scaling_efficiency(const RunResults& run,
                                         const std::map<std::string, double>& one_worker) {
  const auto base = one_worker.find(scaling_series_key(run));
  if (base == one_worker.end() || base->second <= 0) return std::nullopt;
  return scaling_efficiency(run.samples_per_second, run.world_size, base->second);
}

std::vector<std::string> scaling_warnings(const std::vector<ReportRun>& runs) {
  // The reference of each series: the fastest one-worker run (as one_worker_throughput takes it).
  std::map<std::string, const ReportRun*> reference;
  for (const auto& run : runs) {
    if (run.results.world_size != 1) continue;
    auto& best = reference[scaling_series_key(run.results)];
    if (!best || run.results.samples_per_second > best->results.samples_per_second) best = &run;
  }
  const auto one_worker = one_worker_throughput(runs);
  std::vector<std::string> out;
  for (const auto& run : runs) {
    const auto efficiency = scaling_efficiency(run.results, one_worker);
    if (!efficiency || *efficiency <= 1.0 || run.results.world_size < 2) continue;
    const auto& ref = reference.at(scaling_series_key(run.results))->results;
    const auto& r = run.results;
    std::string cause;
    if (ref.batch_size != r.batch_size) {
      cause =
          fmt::format("it trained {} samples per worker and step, this run {}", ref.batch_size, r.batch_size);
    } else if (ref.precision != r.precision) {
      cause = fmt::format("it trained in {}, this run in {}", ref.precision, r.precision);
    } else {
      cause = fmt::format(
          "it ran at {:.0f} samples/s, below the {:.0f} of each of this run's workers: the host was busier "
          "while it ran (other runs or programs on the same cores) or it had fewer threads",
          ref.samples_per_second, r.samples_per_second / r.world_size);
    }
    out.push_back(
        fmt::format("Scaling efficiency {:.2f} for {} is above 1, which {} workers cannot reach: its "
                    "one-worker reference "
                    "({}) is not a fair one: {}.",
                    *efficiency, run.name, r.world_size, reference.at(scaling_series_key(r))->name, cause));
  }
  return out;
}

double comm_mb_per_step(const RunResults& run) {
  return run.comm_bytes / steps_or_one(run) / 1e6;
}

std::optional<double> node_sent_mb_per_step(const RunResults& run) {
  if (!run.node_bytes_sent) return std::nullopt;
  return *run.node_bytes_sent / steps_or_one(run) / 1e6;
}

double comm_wait_ms_per_step(const RunResults& run) {
  return 1e3 * run.comm_wait_seconds / steps_or_one(run);
}

std::vector<int> worker_counts(const std::vector<ReportRun>& runs) {
  std::set<int> counts;
  for (const auto& run : runs) counts.insert(run.results.world_size);
  return {counts.begin(), counts.end()};
}

Table run_table(const std::vector<ReportRun>& runs) {
  const bool node_column = counts_node_traffic(runs);
  const bool mcc_column = reports_mcc(runs);
  Table table{{"run", "strategy", "backend", "workers", "model", "steps", "test top-1", "test top-5"}};
  if (mcc_column) table[0].push_back("test MCC");
  table[0].insert(table[0].end(), {"test loss", "samples/s", "scaling eff.", "payload MB/step"});
  if (node_column) table[0].push_back("node sent MB/step");
  table[0].insert(table[0].end(), {"comm ms/step", "train s"});
  const auto one_worker = one_worker_throughput(runs);
  for (const auto& run : runs) table.push_back(run_row(run, one_worker, node_column, mcc_column));
  return table;
}

Table step_table(const std::vector<ReportRun>& runs) {
  Table table{{"run", "strategy", "model", "test top-1", "sent KB/step", "forward ms", "backward ms",
               "comm ms", "update ms", "step ms"}};
  for (const auto& run : runs) {
    const auto& r = run.results;
    if (!r.step_time) continue;
    const auto& t = *r.step_time;
    const auto ms = [](double seconds) { return fmt::format("{:.2f}", 1e3 * seconds); };
    table.push_back({run.name, r.strategy, r.model, fmt::format("{:.4f}", r.top1),
                     fmt::format("{:.1f}", r.bytes_per_step / 1e3), ms(t.forward), ms(t.backward),
                     ms(t.communication), ms(t.update),
                     ms(t.forward + t.backward + t.communication + t.update)});
  }
  return table;
}

bool shows_step_table(const std::vector<ReportRun>& runs) {
  return std::any_of(runs.begin(), runs.end(),
                     [](const ReportRun& run) { return run.results.step_time.has_value(); });
}

Table throughput_table(const std::vector<ReportRun>& runs) {
  // Several strategies on several workers (zero stage 3 against data_parallel, the FSDP table) are
  // columns of their own; otherwise the best run of a precision and worker count fills its cell.
  std::set<std::string> layouts;
  for (const auto& run : runs) {
    if (run.results.world_size > 1) layouts.insert(run.results.layout);
  }
  const bool by_layout = layouts.size() > 1;
  using Column = std::tuple<std::string, std::string, int>;  // (precision, strategy or "", workers)
  using Row = std::pair<std::string, int>;                   // (model, batch per worker)
  std::set<Column> columns;
  std::map<Row, std::map<Column, double>> cells;  // the best samples/s
  for (const auto& run : runs) {
    const auto& r = run.results;
    const Column column{r.precision, by_layout && r.world_size > 1 ? r.layout : "", r.world_size};
    columns.insert(column);
    auto& cell = cells[{r.model, r.batch_size}][column];
    cell = std::max(cell, r.samples_per_second);
  }
  Table table{{"model", "batch per worker"}};
  for (const auto& [precision, layout, w] : columns) {
    table[0].push_back(fmt::format("{}{}, {} worker{} (samples/s)", precision,
                                   layout.empty() ? "" : ", " + layout, w, w == 1 ? "" : "s"));
  }
  for (const auto& [row, by_column] : cells) {
    std::vector<std::string> cells_of_row{row.first, std::to_string(row.second)};
    for (const auto& column : columns) {
      const auto it = by_column.find(column);
      cells_of_row.push_back(it == by_column.end() ? "" : fmt::format("{:.0f}", it->second));
    }
    table.push_back(std::move(cells_of_row));
  }
  return table;
}

bool shows_throughput_table(const std::vector<ReportRun>& runs) {
  std::set<std::pair<std::string, int>> rows;
  for (const auto& run : runs) rows.emplace(run.results.model, run.results.batch_size);
  return rows.size() > 1 || worker_counts(runs).size() > 1;
}

}  // namespace dtrain::experiment
