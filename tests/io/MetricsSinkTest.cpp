// metrics.jsonl and metrics.csv contents, line by line, and results.json round trips.
#include "dtrain/io/MetricsSink.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>

#include "dtrain/io/JsonFile.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

std::vector<std::string> lines_of(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(JsonlMetricsSink, OneObjectPerLine) {
  dtrain::testing::ScratchDir dir;
  const auto path = dir.path() / "metrics.jsonl";
  {
    JsonlMetricsSink sink(path);
    sink.write({50, 0, 1700000000.5, {{"train/loss", 0.5}, {"train/lr", 0.1}}});
    sink.write({100, 1, 1700000001.0, {{"val/top1", std::numeric_limits<double>::quiet_NaN()}}});
    sink.flush();
  }
  const auto lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  const auto first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first.at("step"), 50);
  EXPECT_EQ(first.at("epoch"), 0);
  EXPECT_DOUBLE_EQ(first.at("wall_time").get<double>(), 1700000000.5);
  EXPECT_DOUBLE_EQ(first.at("train/loss").get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(first.at("train/lr").get<double>(), 0.1);
  EXPECT_EQ(first.size(), 5u);
  const auto second = nlohmann::json::parse(lines[1]);
  EXPECT_TRUE(second.at("val/top1").is_null());
  // Reopening appends (a resumed run keeps its history).
  {
    JsonlMetricsSink sink(path);
    sink.write({150, 1, 1700000002.0, {{"train/loss", 0.25}}});
  }
  EXPECT_EQ(lines_of(path).size(), 3u);
  JsonlMetricsSink sink(path);
  EXPECT_THROW(sink.write({1, 0, 0.0, {{"step", 1.0}}}), std::invalid_argument);
}

TEST(CsvMetricsSink, LongFormRows) {
  dtrain::testing::ScratchDir dir;
  const auto path = dir.path() / "metrics.csv";
  {
    CsvMetricsSink sink(path);
    sink.write({50, 0, 1700000000.5, {{"train/loss", 0.5}, {"a,b", 2.0}}});
    sink.write({60, 1, 1700000001.0, {{"train/loss", std::numeric_limits<double>::infinity()}}});
  }
  {
    CsvMetricsSink reopened(path);  // no second header
    reopened.write({70, 1, 1700000002.0, {{"x", 0.125}}});
  }
  const std::vector<std::string> expected{
      "step,epoch,wall_time,tag,value",   "50,0,1700000000.500000,train/loss,0.5",
      "50,0,1700000000.500000,\"a,b\",2", "60,1,1700000001.000000,train/loss,inf",
      "70,1,1700000002.000000,x,0.125",
  };
  EXPECT_EQ(lines_of(path), expected);
}

TEST(MultiMetricsSink, WritesToEverySink) {
  dtrain::testing::ScratchDir dir;
  auto jsonl = std::make_shared<JsonlMetricsSink>(dir.path() / "m.jsonl");
  auto csv = std::make_shared<CsvMetricsSink>(dir.path() / "m.csv");
  MultiMetricsSink both({jsonl, csv});
  both.write({1, 0, 2.0, {{"loss", 1.5}}});
  both.flush();
  EXPECT_EQ(lines_of(dir.path() / "m.jsonl").size(), 1u);
  EXPECT_EQ(lines_of(dir.path() / "m.csv").size(), 2u);
}

TEST(JsonFile, ResultsRoundTrip) {
  dtrain::testing::ScratchDir dir;
  const nlohmann::json results = {{"top1", 0.91}, {"throughput", {{"samples_per_s", 1234.5}}}, {"ranks", 4}};
  write_json_file(dir.path() / "results.json", results);
  EXPECT_EQ(read_json_file(dir.path() / "results.json"), results);
  std::ofstream(dir.path() / "bad.json") << "{not json";
  EXPECT_THROW(read_json_file(dir.path() / "bad.json"), std::runtime_error);
  EXPECT_THROW(read_json_file(dir.path() / "missing.json"), std::runtime_error);
}

}  // namespace
}  // namespace dtrain::io
