// `dtrain bench throughput`'s results: the ranks' reports of one point combined into its samples/s
// and memory, and the sweep written as JSON lines and as the distributed-training study's tables.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <tuple>

#include "dtrain/cli/BenchThroughput.h"

namespace dtrain::cli {

namespace {

double mib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0);
}

// "12.3 / 12.1": one value per rank.
template <class Field>
std::string per_rank(const std::vector<RankMemory>& ranks, Field field) {
  std::vector<std::string> cells;
  for (const auto& r : ranks) cells.push_back(fmt::format("{:.2f}", mib(field(r))));
  return cells.empty() ? "-" : fmt::format("{}", fmt::join(cells, " / "));
}

std::string escape_cell(std::string text) {
  std::string out;
  for (const char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

ThroughputResult combine_reports(const ThroughputPoint& point, int steps, int warmup,
                                 const std::vector<std::string>& rank_reports) {
  ThroughputResult r;
  r.point = point;
  r.steps = steps;
  r.warmup = warmup;
  std::vector<nlohmann::json> reports;
  for (std::size_t rank = 0; rank < rank_reports.size(); ++rank) {
    nlohmann::json j = nlohmann::json::parse(rank_reports[rank], nullptr, /*allow_exceptions=*/false);
    if (rank_reports[rank].empty() || j.is_discarded() || !j.is_object()) {
      if (r.status == "ok") {
        r.status = "failed";
        r.reason = fmt::format("rank {} wrote no report", rank);
      }
      reports.emplace_back();
      continue;
    }
    if (j.value("status", "failed") != "ok" && (r.status == "ok" || r.reason.rfind("rank ", 0) == 0)) {
      r.status = j.value("status", "failed");
      r.reason = j.value("reason", "");
    }
    reports.push_back(std::move(j));
  }
  if (reports.empty()) {
    r.status = "failed";
    r.reason = "no rank reported";
  }
  if (r.status != "ok") return r;

  std::size_t timed = reports.empty() ? 0 : reports[0]["step_seconds"].size();
  for (const auto& j : reports) timed = std::min(timed, j["step_seconds"].size());
  double seconds = 0.0;
  std::int64_t samples = 0;
  for (std::size_t s = 0; s < timed; ++s) {
    double slowest = 0.0;  // a step ends when its slowest rank ends it
    for (const auto& j : reports) slowest = std::max(slowest, j["step_seconds"][s].get<double>());
    seconds += slowest;
    samples += reports[0]["samples"][s].get<std::int64_t>();
  }
  r.parameters = reports[0].value("parameters", std::int64_t{0});
  r.samples_per_second = seconds > 0 ? static_cast<double>(samples) / seconds : 0.0;
  r.step_ms = timed > 0 ? seconds / static_cast<double>(timed) * 1e3 : 0.0;
  for (std::size_t rank = 0; rank < reports.size(); ++rank) {
    const auto& j = reports[rank];
    r.ranks.push_back(
        {static_cast<int>(rank), j.at("peak_rss_bytes").get<std::uint64_t>(),
         j.at("parameters_bytes").get<std::uint64_t>(), j.at("gradients_bytes").get<std::uint64_t>(),
         j.at("optimizer_bytes").get<std::uint64_t>(), j.value("planned_peak_bytes", std::uint64_t{0})});
  }
  return r;
}

std::string to_json_line(const ThroughputResult& r) {
  // Rounded so that the line reads well: the last digit divides, so 0.01 prints as 0.01.
  auto round_to = [](double v, double per_unit) { return std::round(v * per_unit) / per_unit; };
  nlohmann::ordered_json j;
  j["model"] = r.point.model;
  j["batch"] = r.point.batch;
  j["precision"] = r.point.precision;
  j["workers"] = r.point.workers;
  j["strategy"] = r.point.strategy;
  j["status"] = r.status;
  if (r.status != "ok") j["reason"] = r.reason;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  j["parameters"] = r.parameters;
  j["samples_per_second"] = round_to(r.samples_per_second, 100);
  j["step_ms"] = round_to(r.step_ms, 1000);
  j["ranks"] = nlohmann::ordered_json::array();
  for (const auto& m : r.ranks) {
    nlohmann::ordered_json rank;
    rank["rank"] = m.rank;
    rank["peak_rss_bytes"] = m.peak_rss_bytes;
    rank["parameters_bytes"] = m.parameters_bytes;
    rank["gradients_bytes"] = m.gradients_bytes;
    rank["optimizer_bytes"] = m.optimizer_bytes;
    rank["planned_peak_bytes"] = m.planned_peak_bytes;
    j["ranks"].push_back(std::move(rank));
  }
  return j.dump();
}

void write_markdown(std::ostream& out, const std::vector<ThroughputResult>& results) {
  // The distributed-training study's layout: a row per model and batch, a column per strategy, precision and
  // workers.
  using Row = std::pair<std::string, int>;
  using Column = std::tuple<std::string, std::string, int>;
  std::vector<Row> rows;
  std::vector<Column> columns;
  std::map<std::pair<Row, Column>, std::string> cells;
  for (const auto& r : results) {
    const Row row{r.point.model, r.point.batch};
    const Column column{r.point.strategy, r.point.precision, r.point.workers};
    if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
    if (std::find(columns.begin(), columns.end(), column) == columns.end()) columns.push_back(column);
    cells[{row, column}] = r.status == "ok" ? fmt::format("{:.1f}", r.samples_per_second) : r.status;
  }
  out << "samples/s (the slowest rank's time per step, after the warm-up)\n\n| model | batch |";
  for (const auto& [strategy, precision, workers] : columns) {
    out << fmt::format(" {} {} {}w |", strategy, precision, workers);
  }
  out << "\n|---|---:|";
  for (std::size_t c = 0; c < columns.size(); ++c) out << "---:|";
  out << "\n";
  for (const auto& row : rows) {
    out << fmt::format("| {} | {} |", row.first, row.second);
    for (const auto& column : columns) {
      const auto cell = cells.find({row, column});
      out << " " << (cell == cells.end() ? "-" : cell->second) << " |";
    }
    out << "\n";
  }

  out << "\nper point, memory per rank in MiB (rank 0 / rank 1 / ...): peak resident set, the peak the run "
         "planned before its first step, and the parameters, gradients and optimizer state the strategy "
         "holds\n\n"
         "| model | batch | precision | workers | strategy | samples/s | step ms | peak RSS | planned peak | "
         "parameters | gradients | optimizer | status |\n"
         "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : results) {
    const bool ok = r.status == "ok";
    out << fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.point.model,
                       r.point.batch, r.point.precision, r.point.workers, r.point.strategy,
                       ok ? fmt::format("{:.1f}", r.samples_per_second) : "-",
                       ok ? fmt::format("{:.2f}", r.step_ms) : "-",
                       per_rank(r.ranks, [](const RankMemory& m) { return m.peak_rss_bytes; }),
                       per_rank(r.ranks, [](const RankMemory& m) { return m.planned_peak_bytes; }),
                       per_rank(r.ranks, [](const RankMemory& m) { return m.parameters_bytes; }),
                       per_rank(r.ranks, [](const RankMemory& m) { return m.gradients_bytes; }),
                       per_rank(r.ranks, [](const RankMemory& m) { return m.optimizer_bytes; }),
                       ok ? std::string("ok") : escape_cell(r.status + ": " + r.reason));
  }
  out.flush();
}

}  // namespace dtrain::cli
