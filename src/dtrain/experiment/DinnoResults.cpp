// DiNNO's result files from dtrain's metrics: <problem_name>_results.json holds, per
// evaluation, what the authors' DistMNISTProblem.evaluate_metrics appended to its lists, read back
// from the evaluation records the decentralized strategy writes to metrics.jsonl
// (val/node<i>/loss, val/node<i>/top1, strategy/consensus/node<i>, strategy/distance/<i>/<j>,
// strategy/forward_pass_count, strategy/node<i>/epoch, strategy/node_bytes_sent).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/io/JsonFile.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The record's value of key, or null where the record lacks it.
json value(const MetricRecord& record, const std::string& key) {
  const auto it = record.find(key);
  return it == record.end() ? json(nullptr) : json(it->second);
}

// One value per node: <prefix><i><suffix> for i in [0, nodes).
json per_node(const MetricRecord& record, const std::string& prefix, const std::string& suffix, int nodes) {
  json out = json::array();
  for (int i = 0; i < nodes; ++i) out.push_back(value(record, prefix + std::to_string(i) + suffix));
  return out;
}

// The N x N distance matrix (symmetric, zero diagonal) and each node's mean distance to the others.
json consensus(const MetricRecord& record, int nodes) {
  json distances = json::array();
  for (int i = 0; i < nodes; ++i) {
    json row = json::array();
    for (int j = 0; j < nodes; ++j) {
      if (i == j) {
        row.push_back(0.0);
      } else {
        row.push_back(value(record, fmt::format("strategy/distance/{}/{}", std::min(i, j), std::max(i, j))));
      }
    }
    distances.push_back(std::move(row));
  }
  return {{"distances", std::move(distances)},
          {"node_means", per_node(record, "strategy/consensus/node", "", nodes)}};
}

json metric_entry(const std::string& metric, const MetricRecord& record, int nodes) {
  if (metric == "validation_loss") return per_node(record, "val/node", "/loss", nodes);
  if (metric == "top1_accuracy") return per_node(record, "val/node", "/top1", nodes);
  if (metric == "consensus_error") return consensus(record, nodes);
  if (metric == "forward_pass_count") return value(record, "strategy/forward_pass_count");
  if (metric == "current_epoch") return per_node(record, "strategy/node", "/epoch", nodes);
  throw std::logic_error("seed metric " + metric + " has no entry");  // read_metrics admits no other
}

std::vector<MetricRecord> evaluations(const std::vector<MetricRecord>& records) {
  std::vector<MetricRecord> out;
  for (const auto& r : records) {
    if (r.count("val/node0/loss")) out.push_back(r);
  }
  return out;
}

}  // namespace

const std::vector<std::string>& dinno_metric_names() {
  static const std::vector<std::string> names{"forward_pass_count", "validation_loss", "consensus_error",
                                              "top1_accuracy", "current_epoch"};
  return names;
}

json problem_results(const DinnoProblem& problem, const std::vector<MetricRecord>& records, int nodes) {
  json out = {{"problem_name", problem.name}, {"rounds", json::array()}, {"bytes", json::array()}};
  for (const auto& metric : problem.metrics) out[metric] = json::array();
  for (const auto& record : evaluations(records)) {
    out["rounds"].push_back(value(record, "step"));
    out["bytes"].push_back(value(record, "strategy/node_bytes_sent"));
    for (const auto& metric : problem.metrics) out[metric].push_back(metric_entry(metric, record, nodes));
  }
  return out;
}

json solo_results(const std::vector<MetricRecord>& records, int nodes) {
  const auto evals = evaluations(records);
  if (evals.empty())
    throw std::runtime_error(
        "experiment run 'solo': no evaluation in its metrics.jsonl, so no solo_results.json");
  json out = json::object();
  for (int i = 0; i < nodes; ++i) {
    out[std::to_string(i)] = {
        {"validation_loss", value(evals.back(), fmt::format("val/node{}/loss", i))},
        {"validation_accuracy", value(evals.back(), fmt::format("val/node{}/top1", i))}};
  }
  return out;
}

std::string solo_lines(const json& solo) {
  std::string out;
  for (int i = 0; solo.contains(std::to_string(i)); ++i) {
    const auto& acc = solo[std::to_string(i)]["validation_accuracy"];
    out += fmt::format("Node {} - Validation Acc = {:.4f}\n", i, acc.is_number() ? acc.get<double>() : 0.0);
  }
  return out;
}

json write_dinno_results(const DinnoForm& form, const fs::path& dir) {
  json all = json::object();
  if (form.solo) {
    all["solo"] = solo_results(read_metrics(dir / "solo" / "metrics.jsonl"), form.nodes);
    if (form.writeout) io::write_json_file(dir / "solo_results.json", all["solo"]);
  }
  for (const auto& problem : form.problems) {
    auto results = problem_results(problem, read_metrics(dir / problem.name / "metrics.jsonl"), form.nodes);
    if (form.writeout) io::write_json_file(dir / (problem.name + "_results.json"), results);
    all[problem.name] = std::move(results);
  }
  return all;
}

std::string cuda_note(bool use_cuda, bool cuda_available) {
  if (!use_cuda) return "";
  return cuda_available
             ? "dtrain experiment: use_cuda: true, but dtrain's trainer has no GPU path; the problems "
               "train on the CPU"
             : "dtrain experiment: use_cuda: true, but no CUDA device is usable; the problems train "
               "on the CPU";
}

}  // namespace dtrain::experiment
