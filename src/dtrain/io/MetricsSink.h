// Where logged scalars go: one MetricsRecord per logged step or evaluation, written to any number
// of sinks (metrics.jsonl, metrics.csv, TensorBoard events) through one interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::io {

struct MetricsRecord {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  double wall_time = 0.0;  // seconds since the Unix epoch (TensorBoard's clock); see wall_time_now()
  std::vector<std::pair<std::string, double>> scalars;  // tag -> value, e.g. {"train/loss", 0.41}
};

double wall_time_now();

class MetricsSink {
 public:
  virtual ~MetricsSink();
  virtual void write(const MetricsRecord& record) = 0;
  // Makes everything written so far readable by another process.
  virtual void flush() = 0;
};

using MetricsSinkPtr = std::shared_ptr<MetricsSink>;

// metrics.jsonl: one JSON object per line, {"step":..,"epoch":..,"wall_time":..,"<tag>":<value>,...}.
// Tags named step, epoch or wall_time are rejected (std::invalid_argument). NaN and infinities are
// written as null, which is what JSON can hold.
class JsonlMetricsSink : public MetricsSink {
 public:
  explicit JsonlMetricsSink(const std::filesystem::path& path);
  void write(const MetricsRecord& record) override;
  void flush() override;

 private:
  std::ofstream out_;
};

// metrics.csv in long form, "step,epoch,wall_time,tag,value", one row per scalar, so records with
// different tags (training steps, evaluations) share one header.
class CsvMetricsSink : public MetricsSink {
 public:
  explicit CsvMetricsSink(const std::filesystem::path& path);
  void write(const MetricsRecord& record) override;
  void flush() override;

 private:
  std::ofstream out_;
};

// Writes every record to each of several sinks.
class MultiMetricsSink : public MetricsSink {
 public:
  explicit MultiMetricsSink(std::vector<MetricsSinkPtr> sinks);
  void write(const MetricsRecord& record) override;
  void flush() override;

 private:
  std::vector<MetricsSinkPtr> sinks_;
};

}  // namespace dtrain::io
