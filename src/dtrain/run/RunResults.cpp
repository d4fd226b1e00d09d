// See RunResults.h.
#include "dtrain/run/RunResults.h"

#include <fmt/format.h>
#include <torch/version.h>

#include <algorithm>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/io/JsonFile.h"

namespace dtrain::run {
namespace {

nlohmann::json comm_json(const comm::CommStats& stats) {
  nlohmann::json out = nlohmann::json::object();
  auto entry = [](const comm::OpStats& s) {
    return nlohmann::json{{"calls", s.calls},
                          {"bytes", s.bytes},
                          {"wire_bytes", s.wire_bytes},
                          {"wait_seconds", s.wait_seconds}};
  };
  for (const auto& [name, s] : stats.ops) out[name] = entry(s);
  out["total"] = entry(stats.total());
  return out;
}

// Per-step means over the steps this process ran: each phase of the time split in seconds
// (parallel::StepTiming) and the bytes this rank sent for each step's own communication.
void add_step_means(nlohmann::json& j, const train::TrainResult& r) {
  const double steps = static_cast<double>(std::max<std::int64_t>(1, r.steps_run));
  j["step_time"] = {{"forward_s", r.step_time.forward / steps},
                    {"backward_s", r.step_time.backward / steps},
                    {"comm_s", r.step_time.communication / steps},
                    {"update_s", r.step_time.update / steps}};
  j["bytes_per_step"] = static_cast<double>(r.bytes_sent) / steps;
}

nlohmann::json metrics_json(const train::EvalMetrics& m) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : m.named("")) out[k] = v;
  out["samples"] = m.samples;
  return out;
}

// The final evaluation by class (label order), named where the data set names its classes.
nlohmann::json per_class_json(const train::EvalMetrics& m, const std::vector<std::string>& names) {
  nlohmann::json out = nlohmann::json::array();
  const bool named = names.size() == m.class_samples.size();
  for (std::size_t c = 0; c < m.class_samples.size(); ++c) {
    nlohmann::json entry{{"class", c},
                         {"samples", m.class_samples[c]},
                         {"precision", m.class_precision[c]},
                         {"recall", m.class_recall[c]},
                         {"f1", c < m.class_f1.size() ? m.class_f1[c] : 0.0}};
    if (named) entry["name"] = names[c];
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

nlohmann::json results_json(const config::RunConfig& cfg, const train::Trainer& trainer,
                            const train::TrainResult& r, const io::RunDir& run, const std::string& backend) {
  nlohmann::json j;
  j["name"] = cfg.name;
  j["status"] = r.stopped_early ? "stopped" : "finished";
  j["run_dir"] = run.root().string();
  j["model"] = cfg.model.name;
  j["parameters"] = trainer.model_facts().parameters;
  j["initial_parameter_hash"] = trainer.model_facts().initial_hash;
  j["data_partition_hash"] = trainer.data_partition_hash();
  j["precision"] = trainer.model_facts().precision;
  j["device"] = trainer.device().str();
  j["memory_format"] = trainer.model_facts().channels_last ? "channels_last" : "contiguous";
  if (r.gpu_memory_peak_bytes > 0) j["gpu_memory_peak_bytes"] = r.gpu_memory_peak_bytes;
  for (const auto& [key, value] : trainer.model_facts().device_settings) {
    if (value == "true" || value == "false") {
      j["cuda"][key] = value == "true";
    } else {
      j["cuda"][key] = value;
    }
  }
  if (r.loss_scale > 0.0) {
    j["loss_scale"] = r.loss_scale;
    j["skipped_steps"] = r.skipped_steps;
  }
  j["strategy"] = cfg.parallel.strategy;
  j["backend"] = backend;
  j["world_size"] = trainer.world_size();
  j["steps"] = r.steps;
  // As the metrics files count epochs: a run stopped within its first epoch trained in epoch 1.
  j["epochs"] = r.epochs_reached;
  j["epochs_completed"] = r.epochs_completed;
  j["final"] = metrics_json(r.final_eval);
  j["final"]["per_class"] = per_class_json(r.final_eval, trainer.datasets().class_names);
  // A run stopped (train.max_steps) before its first epoch ended has no epoch's training metrics.
  if (r.last_train.samples > 0) j["train_last_epoch"] = metrics_json(r.last_train);
  if (!r.final_others.empty()) {
    for (const auto& [name, m] : r.final_others) j["final_by_model"][name] = metrics_json(m);
  }
  j["strategy_notes"] = nlohmann::json::object();
  for (const auto& [name, note] : r.strategy_notes) j["strategy_notes"][name] = note;
  j["strategy_metrics"] = nlohmann::json::object();
  for (const auto& [name, value] : r.final_strategy_metrics) j["strategy_metrics"][name] = value;
  j["samples_per_second"] = r.samples_per_second;
  j["train_seconds"] = r.train_seconds;
  add_step_means(j, r);
  j["comm"] = comm_json(r.comm);
  j["stopped_early"] = r.stopped_early;
  j["stop_reason"] = r.stop_reason;
  j["versions"] = {{"dtrain", DTRAIN_VERSION}, {"libtorch", TORCH_VERSION}};
  j["config"] = config::to_json(cfg);
  return j;
}

std::string per_class_csv(const train::EvalMetrics& m, const std::vector<std::string>& names) {
  if (names.empty() || names.size() != m.class_samples.size()) return "";
  std::string csv = "class,name,samples,precision,recall,f1\n";
  for (std::size_t c = 0; c < names.size(); ++c) {
    std::string quoted;  // names hold commas ("tench, Tinca tinca")
    for (const char ch : names[c]) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    csv += fmt::format("{},\"{}\",{},{:.6f},{:.6f},{:.6f}\n", c, quoted, m.class_samples[c],
                       m.class_precision[c], m.class_recall[c], c < m.class_f1.size() ? m.class_f1[c] : 0.0);
  }
  return csv;
}

void record_failure(const io::RunDir& run, const std::string& message, int exit_code) {
  try {
    nlohmann::json j;
    j["status"] = "failed";
    j["error"] = message;
    j["exit_code"] = exit_code;
    j["run_dir"] = run.root().string();
    io::write_json_file(run.results_path(), j);
  } catch (const std::exception&) {
  }
}

}  // namespace dtrain::run
