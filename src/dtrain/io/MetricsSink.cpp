// The JSONL and CSV metrics sinks.
#include "dtrain/io/MetricsSink.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace dtrain::io {
namespace {

std::ofstream open_for_append(const std::filesystem::path& path, bool& fresh) {
  std::error_code ignored;
  fresh = !std::filesystem::exists(path, ignored) || std::filesystem::file_size(path, ignored) == 0;
  std::ofstream out(path, std::ios::app);
  if (!out) {
    throw std::runtime_error("cannot open " + path.string() + " for writing: " + std::strerror(errno) +
                             "; check that the run folder is writable");
  }
  return out;
}

// CSV quoting (RFC 4180) for tags, which are free text.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

// Shortest text that reads back as the same double.
std::string number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{}", x);
}

}  // namespace

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

MetricsSink::~MetricsSink() = default;

JsonlMetricsSink::JsonlMetricsSink(const std::filesystem::path& path) {
  bool fresh = false;
  out_ = open_for_append(path, fresh);
}

void JsonlMetricsSink::write(const MetricsRecord& record) {
  nlohmann::json line = {{"step", record.step}, {"epoch", record.epoch}, {"wall_time", record.wall_time}};
  for (const auto& [tag, value] : record.scalars) {
    if (tag == "step" || tag == "epoch" || tag == "wall_time") {
      throw std::invalid_argument("metrics tag \"" + tag +
                                  "\" collides with a field of every metrics.jsonl line; rename it, e.g. "
                                  "\"train/" +
                                  tag + "\"");
    }
    line[tag] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  out_ << line.dump() << '\n';
}

void JsonlMetricsSink::flush() {
  out_.flush();
}

CsvMetricsSink::CsvMetricsSink(const std::filesystem::path& path) {
  bool fresh = false;
  out_ = open_for_append(path, fresh);
  if (fresh) out_ << "step,epoch,wall_time,tag,value\n";
}

void CsvMetricsSink::write(const MetricsRecord& record) {
  const std::string head = std::to_string(record.step) + "," + std::to_string(record.epoch) + "," +
                           fmt::format("{:.6f}", record.wall_time);
  for (const auto& [tag, value] : record.scalars)
    out_ << head << ',' << csv_field(tag) << ',' << number(value) << '\n';
}

void CsvMetricsSink::flush() {
  out_.flush();
}

MultiMetricsSink::MultiMetricsSink(std::vector<MetricsSinkPtr> sinks) : sinks_(std::move(sinks)) {}

void MultiMetricsSink::write(const MetricsRecord& record) {
  for (const auto& sink : sinks_) sink->write(record);
}

void MultiMetricsSink::flush() {
  for (const auto& sink : sinks_) sink->flush();
}

}  // namespace dtrain::io
