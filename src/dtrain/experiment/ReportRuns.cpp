// Reading the runs a report shows: results.json (one per run, and the experiment's list of runs)
// and metrics.jsonl, into the structs of ReportRuns.h.
#include "dtrain/experiment/ReportRuns.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "dtrain/io/JsonFile.h"
#include "dtrain/parallel/Registry.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The object under `key`, or an empty one when there is none.
const json& member(const json& object, const char* key) {
  static const json empty = json::object();
  const auto it = object.find(key);
  return it != object.end() && it->is_object() ? *it : empty;
}

MetricRecord metric_record(const json& line) {
  MetricRecord record;
  for (const auto& [key, value] : line.items()) {
    if (value.is_number()) record[key] = value.get<double>();
  }
  return record;
}

// RunResults::kind of a run of `strategy` whose config.parallel is `parallel`. A strategy this build
// does not know is a kind of its own.
std::string training_kind(const std::string& strategy, const json& parallel) {
  if (strategy.empty()) return "";
  try {
    const auto& info = parallel::find_strategy(strategy);
    if (info.exact) return "";
    const auto& options = member(parallel, info.options_section.c_str());
    const auto algorithm = options.find("algorithm");
    return algorithm != options.end() && algorithm->is_string()
               ? info.name + " " + algorithm->get<std::string>()
               : info.name;
  } catch (const std::invalid_argument&) {
    return strategy;
  }
}

}  // namespace

RunResults parse_run_results(const json& r) {
  RunResults out;
  out.model = r.value("model", "");
  out.strategy = r.value("strategy", "");
  out.backend = r.value("backend", "");
  out.precision = r.value("precision", "fp32");
  out.world_size = r.value("world_size", 1);
  // The Horovod/FSDP/pipeline study's table sets the wire format beside the arithmetic: a run on several
  // workers whose strategy compresses its all-reduce (data_parallel), and whose gradients travel
  // compressed, is "fp32, fp16 wire" or "fp32, powersgd r4 wire". A strategy this build does not
  // register (a run of another build) shows none.
  const auto* info = parallel::strategy_info(out.strategy);
  out.layout = out.strategy;
  if (info) {
    const auto& options = member(member(member(r, "config"), "parallel"), info->options_section.c_str());
    const auto stage = options.find("stage");
    if (stage != options.end() && stage->is_number_integer())
      out.layout += fmt::format(" stage {}", stage->get<int>());
  }
  if (out.world_size > 1 && info && info->capabilities.wire_compression) {
    const auto& options = member(member(member(r, "config"), "parallel"), info->options_section.c_str());
    const std::string wire = options.value("compression", "none");
    if (wire != "none") {
      out.precision += wire == "powersgd"
                           ? fmt::format(", powersgd r{} wire", options.value("powersgd_rank", 1))
                           : fmt::format(", {} wire", wire);
    }
  }
  out.steps = r.value("steps", std::int64_t{1});
  out.epochs = r.value("epochs", 1);
  out.batch_size = member(member(r, "config"), "data").value("batch_size", 0);
  const auto& final_eval = member(r, "final");
  out.top1 = final_eval.value("top1", 0.0);
  out.top5 = final_eval.value("top5", 0.0);
  out.loss = final_eval.value("loss", 0.0);
  const auto mcc = final_eval.find("mcc");
  if (mcc != final_eval.end() && mcc->is_number()) out.mcc = mcc->get<double>();
  out.samples_per_second = r.value("samples_per_second", 0.0);
  out.train_seconds = r.value("train_seconds", 0.0);
  const auto& step_time = member(r, "step_time");
  out.comm_wait_seconds = step_time.contains("comm_s")
                              ? step_time.value("comm_s", 0.0) * static_cast<double>(out.steps)
                              : r.value("comm_wait_seconds", 0.0);
  out.comm_bytes = member(member(r, "comm"), "total").value("bytes", 0.0);
  const auto& strategy_metrics = member(r, "strategy_metrics");
  const auto node_bytes = strategy_metrics.find("node_bytes_sent");
  if (node_bytes != strategy_metrics.end() && node_bytes->is_number())
    out.node_bytes_sent = node_bytes->get<double>();
  out.kind = training_kind(out.strategy, member(member(r, "config"), "parallel"));
  if (step_time.contains("forward_s")) {
    out.step_time =
        RunResults::StepSplit{step_time.value("forward_s", 0.0), step_time.value("backward_s", 0.0),
                              step_time.value("comm_s", 0.0), step_time.value("update_s", 0.0)};
  }
  out.bytes_per_step = r.value("bytes_per_step", 0.0);
  return out;
}

std::vector<MetricRecord> read_metrics(const fs::path& path) {
  std::vector<MetricRecord> records;
  std::ifstream lines(path);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& e) {
      throw std::runtime_error(fmt::format("{}:{} is not valid JSON ({})", path.string(), number, e.what()));
    }
    if (!record.is_object()) {
      throw std::runtime_error(
          fmt::format("{}:{}: expected a JSON object of metrics", path.string(), number));
    }
    records.push_back(metric_record(record));
  }
  return records;
}

ReportRun read_run(const std::string& name, const fs::path& run_dir) {
  const auto path = run_dir / "results.json";
  const auto results = io::read_json_file(path);
  if (!results.is_object()) throw std::runtime_error(path.string() + ": expected a JSON object of results");
  if (results.value("status", "") == "failed") {
    throw std::invalid_argument(fmt::format("report: the run in {} failed ({}); nothing to report",
                                            run_dir.string(), results.value("error", "no error recorded")));
  }
  return {name, parse_run_results(results), read_metrics(run_dir / "metrics.jsonl")};
}

std::vector<ReportRun> read_report_runs(const fs::path& dir) {
  if (!fs::exists(dir / "results.json")) {
    throw std::invalid_argument(
        fmt::format("report: {} holds no results.json; expected a run folder or a finished experiment folder",
                    dir.string()));
  }
  const auto path = dir / "results.json";
  const auto results = io::read_json_file(path);
  if (!fs::exists(dir / "experiment.yaml")) {
    return {read_run(results.is_object() ? results.value("name", "run") : "run", dir)};
  }
  if (!results.is_object() || !results.contains("runs") || !results["runs"].is_array()) {
    throw std::runtime_error(path.string() + ": expected an experiment's results with a list of runs");
  }
  std::vector<ReportRun> runs;
  for (const auto& entry : results["runs"]) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) {
      throw std::runtime_error(path.string() + ": every entry of runs needs a name");
    }
    const auto name = entry["name"].get<std::string>();
    runs.push_back(read_run(name, dir / name));
  }
  return runs;
}

}  // namespace dtrain::experiment
