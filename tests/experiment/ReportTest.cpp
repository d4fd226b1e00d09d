// The report from hand-written runs with known numbers: what is read from results.json and
// metrics.jsonl, every computed cell of the tables, the series' points, the data files and script
// gnuplot is given, and the pages (report.html self-contained, every PNG embedded).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/experiment/Report.h"
#include "dtrain/experiment/ReportFigures.h"
#include "dtrain/experiment/ReportPage.h"
#include "dtrain/experiment/ReportRuns.h"
#include "dtrain/experiment/ReportSeries.h"
#include "dtrain/experiment/ReportTables.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::read_file;
using nlohmann::json;

// results.json as `dtrain train` writes it, with the fields the report reads.
json results(const std::string& model, int workers, double samples_per_second) {
  return {{"name", "run"},
          {"model", model},
          {"strategy", workers == 1 ? "local" : "data_parallel"},
          {"backend", workers == 1 ? "none" : "gloo"},
          {"precision", "fp32"},
          {"world_size", workers},
          {"steps", 10},
          {"epochs", 2},
          {"samples_per_second", samples_per_second},
          {"train_seconds", 0.0},
          {"comm_wait_seconds", 0.0},
          {"final", {{"top1", 0.5}, {"top5", 0.9}, {"loss", 1.25}, {"samples", 16}}},
          {"comm", {{"total", {{"calls", 0}, {"bytes", 0}}}}},
          {"config", {{"data", {{"batch_size", 32}}}}}};
}

ReportRun run(const std::string& name, const json& r, std::vector<MetricRecord> metrics = {}) {
  return {name, parse_run_results(r), std::move(metrics)};
}

// A scaling study of the mlp on 1, 2 and 4 workers (a second, slower 2-worker run), and a lenet5
// run in bf16 on 2 workers with no one-worker run to compare with.
std::vector<ReportRun> scaling_runs() {
  auto one = results("mlp", 1, 100);
  one["train_seconds"] = 8.0;
  auto two = results("mlp", 2, 180);
  two["steps"] = 5;
  two["comm"]["total"]["bytes"] = 4e6;
  two["comm_wait_seconds"] = 0.01;
  two["train_seconds"] = 5.0;
  auto slow_two = results("mlp", 2, 150);
  slow_two["train_seconds"] = 4.5;  // the shortest 2-worker time, though not the best throughput
  auto four = results("mlp", 4, 300);
  four["train_seconds"] = 0.0;  // no time recorded: not on the time curve
  auto lenet = results("lenet5", 2, 50);
  lenet["precision"] = "bf16";
  lenet["config"]["data"]["batch_size"] = 64;
  return {run("one", one), run("two", two), run("slow_two", slow_two), run("four", four),
          run("lenet", lenet)};
}

class ReportTest : public ::testing::Test {
 protected:
  fs::path write(const fs::path& relative, const std::string& text) {
    fs::create_directories((dir_ / relative).parent_path());
    std::ofstream(dir_ / relative) << text;
    return dir_ / relative;
  }

  // An experiment folder: experiment.yaml, results.json listing the runs, a folder per run.
  void write_experiment(const std::vector<std::pair<std::string, json>>& runs) {
    write("experiment.yaml", "base: base.yaml\n");
    json list = json::array();
    for (const auto& [name, r] : runs) {
      list.push_back({{"name", name}});
      write(fs::path(name) / "results.json", r.dump());
    }
    write("results.json", json{{"runs", list}, {"complete", true}}.dump());
  }

  dtrain::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path();
};

TEST_F(ReportTest, ReadsWhatARunRecorded) {
  auto r = results("mlp", 2, 1234.5);
  r["name"] = "dp";
  r["steps"] = 40;
  r["comm"]["total"]["bytes"] = 8e6;
  r["comm_wait_seconds"] = 0.2;
  write("results.json", r.dump());
  write("metrics.jsonl",
        "{\"step\": 1, \"epoch\": 1, \"wall_time\": 100.5, \"train/loss\": 2.5}\n\n"
        "{\"step\": 2, \"epoch\": 1, \"wall_time\": 101.0, \"val/loss\": null, \"note\": \"text\"}\n");
  const auto runs = read_report_runs(dir_);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "dp");
  const auto& got = runs[0].results;
  EXPECT_EQ(got.model, "mlp");
  EXPECT_EQ(got.strategy, "data_parallel");
  EXPECT_EQ(got.backend, "gloo");
  EXPECT_EQ(got.precision, "fp32");
  EXPECT_EQ(got.world_size, 2);
  EXPECT_EQ(got.steps, 40);
  EXPECT_EQ(got.epochs, 2);
  EXPECT_EQ(got.batch_size, 32);
  EXPECT_EQ(got.top1, 0.5);
  EXPECT_EQ(got.top5, 0.9);
  EXPECT_EQ(got.loss, 1.25);
  EXPECT_EQ(got.samples_per_second, 1234.5);
  EXPECT_EQ(got.comm_bytes, 8e6);
  EXPECT_EQ(got.comm_wait_seconds, 0.2);
  // Numeric fields only: null and text are left out; the empty line is no record.
  ASSERT_EQ(runs[0].metrics.size(), 2u);
  EXPECT_EQ(runs[0].metrics[0],
            (MetricRecord{{"step", 1}, {"epoch", 1}, {"wall_time", 100.5}, {"train/loss", 2.5}}));
  EXPECT_EQ(runs[0].metrics[1], (MetricRecord{{"step", 2}, {"epoch", 1}, {"wall_time", 101.0}}));
}

TEST_F(ReportTest, DataParallelWireCompressionJoinsThePrecision) {
  auto results = [](const std::string& strategy, int world, const json& dp) {
    return json{{"strategy", strategy},
                {"world_size", world},
                {"precision", "bf16"},
                {"config", {{"parallel", {{"data_parallel", dp}}}}}};
  };
  EXPECT_EQ(parse_run_results(results("data_parallel", 2, {{"compression", "fp16"}})).precision,
            "bf16, fp16 wire");
  EXPECT_EQ(
      parse_run_results(results("data_parallel", 2, {{"compression", "powersgd"}, {"powersgd_rank", 4}}))
          .precision,
      "bf16, powersgd r4 wire");
  EXPECT_EQ(parse_run_results(results("data_parallel", 2, {{"compression", "none"}})).precision, "bf16");
  // One worker sends nothing, and other strategies do not read data_parallel's options.
  EXPECT_EQ(parse_run_results(results("data_parallel", 1, {{"compression", "fp16"}})).precision, "bf16");
  EXPECT_EQ(parse_run_results(results("dad", 2, {{"compression", "fp16"}})).precision, "bf16");
  // A strategy this build does not register (a run of another build) is read without a wire.
  EXPECT_EQ(parse_run_results(results("not_registered", 2, {{"compression", "fp16"}})).precision, "bf16");
}

TEST_F(ReportTest, FieldsAResultsFileLacksTakeTheirDefaults) {
  const auto r = parse_run_results(json{{"model", "mlp"}});
  EXPECT_EQ(r.precision, "fp32");
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.steps, 1);
  EXPECT_EQ(r.batch_size, 0);
  EXPECT_EQ(r.comm_bytes, 0.0);
}

TEST_F(ReportTest, ReadsAnExperimentsRunsInItsOrder) {
  write_experiment({{"b", results("mlp", 1, 10)}, {"a", results("mlp", 2, 20)}});
  write(fs::path("a") / "metrics.jsonl", "{\"step\": 3, \"train/loss\": 1.0}\n");
  const auto runs = read_report_runs(dir_);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "b");
  EXPECT_EQ(runs[0].results.samples_per_second, 10.0);
  EXPECT_TRUE(runs[0].metrics.empty());  // no metrics.jsonl: no records
  EXPECT_EQ(runs[1].name, "a");
  EXPECT_EQ(runs[1].results.world_size, 2);
  EXPECT_EQ(runs[1].metrics, (std::vector<MetricRecord>{{{"step", 3}, {"train/loss", 1.0}}}));
}

// The error names the file (and the line for metrics.jsonl).
void expect_error_naming(const fs::path& dir, const std::string& name) {
  try {
    read_report_runs(dir);
    FAIL() << "no error; expected one naming " << name;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

TEST_F(ReportTest, AMissingOrMalformedFileIsAnErrorNamingIt) {
  EXPECT_THROW(read_report_runs(dir_), std::invalid_argument);
  expect_error_naming(dir_, dir_.string());
  write_experiment({{"a", results("mlp", 1, 10)}, {"b", results("mlp", 2, 20)}});
  fs::remove(dir_ / "b" / "results.json");
  expect_error_naming(dir_, (dir_ / "b" / "results.json").string());
  write(fs::path("b") / "results.json", "{\"model\": \"mlp\", ");
  expect_error_naming(dir_, (dir_ / "b" / "results.json").string());
  write(fs::path("b") / "results.json", "[1, 2]");
  expect_error_naming(dir_, (dir_ / "b" / "results.json").string());
  write(fs::path("b") / "results.json", results("mlp", 2, 20).dump());
  write(fs::path("b") / "metrics.jsonl", "{\"step\": 1}\n{\"step\": 2,\n");
  expect_error_naming(dir_, (dir_ / "b" / "metrics.jsonl").string() + ":2");
  write(fs::path("b") / "metrics.jsonl", "{\"step\": 1}\n\n[3]\n");
  expect_error_naming(dir_, (dir_ / "b" / "metrics.jsonl").string() + ":3");
  write("results.json", "{\"complete\": true}");
  expect_error_naming(dir_, (dir_ / "results.json").string());
}

TEST_F(ReportTest, ScalingEfficiencyIsThroughputOverNTimesTheBestOneWorkerThroughput) {
  EXPECT_DOUBLE_EQ(scaling_efficiency(180, 2, 100), 0.9);
  EXPECT_DOUBLE_EQ(scaling_efficiency(300, 4, 100), 0.75);
  EXPECT_EQ(scaling_efficiency(300, 4, 0), 0.0);
  auto runs = scaling_runs();
  auto slower_one = results("mlp", 1, 90);
  runs.push_back(run("slower_one", slower_one));
  const auto one_worker = one_worker_throughput(runs);
  EXPECT_EQ(one_worker, (std::map<std::string, double>{{"mlp", 100}}));  // the best; lenet5 has none
  EXPECT_DOUBLE_EQ(*scaling_efficiency(runs[1].results, one_worker), 0.9);
  EXPECT_DOUBLE_EQ(*scaling_efficiency(runs[5].results, one_worker), 0.9);  // 90 / (1 x 100)
  EXPECT_FALSE(scaling_efficiency(runs[4].results, one_worker).has_value());
}

// A decentralized run of one algorithm as results.json records it: the algorithm under
// config.parallel.decentralized.
json decentralized(const std::string& algorithm, int workers, double samples_per_second) {
  auto r = results("dinnocnn", workers, samples_per_second);
  r["strategy"] = "decentralized";
  r["config"]["parallel"] = {{"decentralized", {{"algorithm", algorithm}}}};
  return r;
}

// Note [The scaling reference]: DiNNO's template on one worker (vanilla_cadmm, vanilla_dsgd) is two
// references, one per algorithm; a dsgd run on 5 workers scales against the one-worker dsgd run,
// and neither cadmm's one-worker run nor a local run of the same model is a reference for dsgd or
// for choco, which has none. data_parallel still scales against local (both exact).
TEST_F(ReportTest, ScalingEfficiencyComparesOnlyRunsOfTheSameKind) {
  const std::vector<ReportRun> runs{run("vanilla_cadmm", decentralized("cadmm", 1, 400)),
                                    run("vanilla_dsgd", decentralized("dsgd", 1, 100)),
                                    run("dsgd_w5", decentralized("dsgd", 5, 450)),
                                    run("choco_w5", decentralized("choco", 5, 300)),
                                    run("local", results("dinnocnn", 1, 1000)),
                                    run("dp2", results("dinnocnn", 2, 1800))};
  EXPECT_EQ(runs[0].results.kind, "decentralized cadmm");
  EXPECT_EQ(runs[4].results.kind, "");
  EXPECT_EQ(runs[5].results.kind, "");
  EXPECT_EQ(scaling_series_key(runs[1].results), "dinnocnn (decentralized dsgd)");
  EXPECT_EQ(one_worker_throughput(runs),
            (std::map<std::string, double>{{"dinnocnn", 1000},
                                           {"dinnocnn (decentralized cadmm)", 400},
                                           {"dinnocnn (decentralized dsgd)", 100}}));
  const auto table = run_table(runs);
  ASSERT_EQ(table.size(), 7u);
  ASSERT_EQ(table[0][10], "scaling eff.");
  EXPECT_EQ(table[1][10], "1.00");  // vanilla_cadmm against itself
  EXPECT_EQ(table[2][10], "1.00");  // vanilla_dsgd against itself, not 100 / 400
  EXPECT_EQ(table[3][10], "0.90");  // 450 / (5 x 100)
  EXPECT_EQ(table[4][10], "");      // no one-worker choco run
  EXPECT_EQ(table[6][10], "0.90");  // 1800 / (2 x 1000)
  EXPECT_TRUE(scaling_warnings(runs).empty());
  const auto series = scaling_series(runs);
  ASSERT_EQ(series.size(), 3u);
  EXPECT_EQ(series[2].key, "dinnocnn (decentralized dsgd)");
  EXPECT_EQ(series[2].model, "dinnocnn");
  EXPECT_EQ(series[2].efficiency, (std::vector<double>{1.0, 0.9}));
}

// Note [Scaling efficiency above 1]: nothing is flagged in a fair study; a run above 1 is, naming its
// reference and the cause that holds: another batch, another precision, or a slower reference.
TEST_F(ReportTest, AScalingEfficiencyAboveOneIsFlaggedWithItsCause) {
  EXPECT_TRUE(scaling_warnings(scaling_runs()).empty());
  auto slow_one = results("mlp", 1, 40);
  auto two = results("mlp", 2, 180);
  const auto slow = scaling_warnings({run("one", slow_one), run("two", two)});
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(
      slow[0],
      "Scaling efficiency 2.25 for two is above 1, which 2 workers cannot reach: its one-worker reference "
      "(one) is not a fair one: it ran at 40 samples/s, below the 90 of each of this run's workers: the host "
      "was busier while it ran (other runs or programs on the same cores) or it had fewer threads.");
  auto small_batch = results("mlp", 1, 40);
  small_batch["config"]["data"]["batch_size"] = 8;
  const auto batch = scaling_warnings({run("one", small_batch), run("two", two)});
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_NE(batch[0].find("it trained 8 samples per worker and step, this run 32"), std::string::npos)
      << batch[0];
  auto bf16 = results("mlp", 2, 180);
  bf16["precision"] = "bf16";
  const auto precision = scaling_warnings({run("one", results("mlp", 1, 40)), run("two", bf16)});
  ASSERT_EQ(precision.size(), 1u);
  EXPECT_NE(precision[0].find("it trained in fp32, this run in bf16"), std::string::npos) << precision[0];
}

TEST_F(ReportTest, CommunicationPerStepDividesByTheSteps) {
  const auto two = scaling_runs()[1].results;  // 4e6 bytes and 0.01 s over 5 steps
  EXPECT_DOUBLE_EQ(comm_mb_per_step(two), 0.8);
  EXPECT_DOUBLE_EQ(comm_wait_ms_per_step(two), 2.0);
  RunResults no_steps;
  no_steps.steps = 0;
  no_steps.comm_bytes = 3e6;
  EXPECT_DOUBLE_EQ(comm_mb_per_step(no_steps), 3.0);  // counted as one step
}

TEST_F(ReportTest, TheRunTableHasEveryRunsNumbers) {
  const auto table = run_table(scaling_runs());
  ASSERT_EQ(table.size(), 6u);
  EXPECT_EQ(table[0],
            (std::vector<std::string>{"run", "strategy", "backend", "workers", "model", "steps", "test top-1",
                                      "test top-5", "test loss", "samples/s", "scaling eff.",
                                      "payload MB/step", "comm ms/step", "train s"}));
  EXPECT_EQ(table[1], (std::vector<std::string>{"one", "local", "none", "1", "mlp", "10", "0.5000", "0.9000",
                                                "1.2500", "100", "1.00", "0.000", "0.000", "8.00"}));
  EXPECT_EQ(table[2],
            (std::vector<std::string>{"two", "data_parallel", "gloo", "2", "mlp", "5", "0.5000", "0.9000",
                                      "1.2500", "180", "0.90", "0.800", "2.000", "5.00"}));
  EXPECT_EQ(table[3][9], "150");
  EXPECT_EQ(table[3][10], "0.75");  // 150 / (2 x 100)
  EXPECT_EQ(table[4][10], "0.75");  // 300 / (4 x 100)
  EXPECT_EQ(table[5][0], "lenet");
  EXPECT_EQ(table[5][10], "");  // no one-worker lenet5 run
}

// A classifier's results carry Matthews correlation (final.mcc, CoLA's metric): the run table shows it
// beside top-1 and top-5 where some run reports it, empty for runs that do not.
TEST_F(ReportTest, TheRunTableShowsMatthewsCorrelationWhereARunReportsIt) {
  auto cola = results("transformer", 1, 50);
  cola["final"]["mcc"] = 0.25;
  const auto table = run_table({run("cola", cola), run("two", results("mlp", 2, 180))});
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0][7], "test top-5");
  EXPECT_EQ(table[0][8], "test MCC");
  EXPECT_EQ(table[0][9], "test loss");
  EXPECT_EQ(table[1][8], "0.2500");
  EXPECT_EQ(table[1][9], "1.2500");
  EXPECT_EQ(table[2][8], "");
  EXPECT_EQ(table[2].size(), table[0].size());
}

// Graph nodes on one rank exchange in memory: the rank hands nothing to collectives (payload 0), but
// the strategy counts what each node sent (strategy_metrics.node_bytes_sent), and the table shows
// it per step in a column of its own; runs that count no node traffic leave it empty.
TEST_F(ReportTest, TheRunTableShowsWhatGraphNodesSentWhereTheStrategyCountsIt) {
  auto nodes = decentralized("cadmm", 1, 400);
  nodes["steps"] = 30;
  nodes["strategy_metrics"] = {{"node_bytes_sent", 10920960.0}, {"consensus_error", 0.125}};
  const auto table = run_table({run("vanilla_cadmm", nodes), run("two", results("mlp", 2, 180))});
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0],
            (std::vector<std::string>{"run", "strategy", "backend", "workers", "model", "steps", "test top-1",
                                      "test top-5", "test loss", "samples/s", "scaling eff.",
                                      "payload MB/step", "node sent MB/step", "comm ms/step", "train s"}));
  EXPECT_EQ(table[1][11], "0.000");  // payload: nothing crossed a rank's links
  EXPECT_EQ(table[1][12], "0.364");  // 10,920,960 bytes per node over 30 steps
  EXPECT_EQ(table[2][12], "");
  EXPECT_EQ(table[2].size(), table[0].size());
}

// The run table's time column is the step's communication phase (step_time.comm_s) and is named
// after it, as the step table's "comm ms": comm.total.wait_seconds, the results' "wait", is another
// quantity (every wait on the strategy's collectives).
TEST_F(ReportTest, TheRunTablesCommColumnIsTheStepsCommunicationPhase) {
  auto r = results("mlp", 2, 180);
  r["steps"] = 40;
  r["step_time"] = {{"forward_s", 0.004}, {"backward_s", 0.006}, {"comm_s", 0.0025}, {"update_s", 0.001}};
  r["comm"]["total"]["wait_seconds"] = 0.5;  // 12.5 ms per step: not what the column shows
  const auto table = run_table({run("two", r)});
  ASSERT_EQ(table.size(), 2u);
  EXPECT_EQ(table[0][12], "comm ms/step");
  EXPECT_EQ(table[1][12], "2.500");
  for (const auto& header : table[0]) EXPECT_EQ(header.find("wait"), std::string::npos) << header;
  const auto steps = step_table({run("two", r)});
  EXPECT_EQ(steps[0][7], "comm ms");
  EXPECT_EQ(steps[1][7], "2.50");
}

TEST_F(ReportTest, TheThroughputTableIsModelAndBatchAgainstPrecisionAndWorkers) {
  const auto table = throughput_table(scaling_runs());
  const Table expected{
      {"model", "batch per worker", "bf16, 2 workers (samples/s)", "fp32, 1 worker (samples/s)",
       "fp32, 2 workers (samples/s)", "fp32, 4 workers (samples/s)"},
      {"lenet5", "64", "50", "", "", ""},
      {"mlp", "32", "", "100", "180", "300"}};  // the best of the two 2-worker runs
  EXPECT_EQ(table, expected);
  EXPECT_TRUE(shows_throughput_table(scaling_runs()));
  EXPECT_EQ(worker_counts(scaling_runs()), (std::vector<int>{1, 2, 4}));
  // One model x batch on one worker count compares nothing.
  const std::vector<ReportRun> single{run("a", results("mlp", 2, 1)), run("b", results("mlp", 2, 2))};
  EXPECT_FALSE(shows_throughput_table(single));
  auto other_batch = results("mlp", 2, 3);
  other_batch["config"]["data"]["batch_size"] = 64;
  EXPECT_TRUE(shows_throughput_table({single[0], run("c", other_batch)}));
}

TEST_F(ReportTest, LearningCurvesAreTheRecordsThatLoggedTheSeries) {
  const auto r =
      run("r", results("mlp", 1, 1),
          {{{"step", 1}, {"epoch", 1}, {"wall_time", 100.0}, {"train/loss", 2.5}},
           {{"step", 2}, {"epoch", 1}, {"wall_time", 100.5}, {"train/loss", 2.0}},
           {{"step", 2}, {"epoch", 1}, {"wall_time", 101.0}, {"val/loss", 1.5}, {"val/top1", 0.25}},
           {{"step", 4}, {"epoch", 2}, {"wall_time", 102.5}, {"train/loss", 1.0}},
           {{"step", 4}, {"epoch", 2}, {"wall_time", 103.0}, {"val/top1", 0.5}}});
  auto points = [](const std::vector<Point>& curve) {
    std::vector<std::pair<double, double>> out;
    for (const auto& p : curve) out.emplace_back(p.x, p.y);
    return out;
  };
  using Points = std::vector<std::pair<double, double>>;
  EXPECT_EQ(points(learning_curve(r, "step", "train/loss")), (Points{{1, 2.5}, {2, 2.0}, {4, 1.0}}));
  EXPECT_EQ(points(learning_curve(r, "step", "val/loss")), (Points{{2, 1.5}}));
  EXPECT_EQ(points(learning_curve(r, "epoch", "val/top1")), (Points{{1, 0.25}, {2, 0.5}}));
  // Against wall time: seconds since the run's first record.
  EXPECT_EQ(points(learning_curve(r, "wall_time", "val/top1")), (Points{{1.0, 0.25}, {3.0, 0.5}}));
  EXPECT_TRUE(learning_curve(r, "step", "val/top5").empty());
}

TEST_F(ReportTest, ScalingSeriesHaveTheBestRunAtEachWorkerCountAndTheIdealLines) {
  const auto series = scaling_series(scaling_runs());
  ASSERT_EQ(series.size(), 1u);  // lenet5 has no one-worker run to scale from
  const auto& s = series[0];
  EXPECT_EQ(s.model, "mlp");
  auto points = [](const std::vector<Point>& curve) {
    std::vector<std::pair<double, double>> out;
    for (const auto& p : curve) out.emplace_back(p.x, p.y);
    return out;
  };
  using Points = std::vector<std::pair<double, double>>;
  EXPECT_EQ(points(s.throughput), (Points{{1, 100}, {2, 180}, {4, 300}}));
  EXPECT_EQ(s.efficiency, (std::vector<double>{1.0, 0.9, 0.75}));
  EXPECT_EQ(points(s.ideal), (Points{{1, 100}, {2, 200}, {4, 400}}));
  EXPECT_EQ(points(s.time), (Points{{1, 8.0}, {2, 4.5}}));  // the shortest; 4 workers recorded none
  EXPECT_EQ(points(s.ideal_time), (Points{{1, 8.0}, {2, 4.0}}));
}

TEST_F(ReportTest, CommunicationBarsAreOnePerRun) {
  const auto bars = comm_bars(scaling_runs());
  ASSERT_EQ(bars.size(), 5u);
  EXPECT_EQ(bars[0].label, "one (local)");
  EXPECT_EQ(bars[0].mb_per_step, 0.0);
  EXPECT_EQ(bars[1].label, "two (data_parallel)");
  EXPECT_DOUBLE_EQ(bars[1].mb_per_step, 0.8);
  EXPECT_DOUBLE_EQ(bars[1].wait_ms_per_step, 2.0);
}

TEST_F(ReportTest, ThePlotScriptDrawsEveryFigureWithAPointFromItsDataFiles) {
  auto runs = scaling_runs();
  runs[0].metrics = {{{"step", 1}, {"epoch", 1}, {"wall_time", 10.0}, {"train/loss", 2.5}},
                     {{"step", 2}, {"epoch", 1}, {"wall_time", 12.0}, {"val/loss", 1.5}, {"val/top1", 0.25}}};
  runs[1].metrics = {{{"step", 1}, {"train/loss", 2.0}}};
  const auto plots = dir_ / "plots";
  fs::create_directories(plots);
  const auto script = write_plot_script(runs, plots);
  std::vector<std::string> pngs;
  for (const auto& f : script.figures) pngs.push_back(f.png);
  // No top-5 and no epoch-mean training metrics anywhere: those figures are left out.
  EXPECT_EQ(pngs, (std::vector<std::string>{"loss.png", "top1.png", "loss_epoch.png", "top1_epoch.png",
                                            "loss_time.png", "top1_time.png", "throughput.png",
                                            "training_time.png", "comm_bytes.png", "comm_wait.png"}));
  EXPECT_EQ(script.figures[0].caption, "Loss against step");
  EXPECT_EQ(read_file(plots / "run0_train_loss.dat"), "1 2.5\n");
  EXPECT_EQ(read_file(plots / "run0_val_loss_time.dat"), "2 1.5\n");
  EXPECT_EQ(read_file(plots / "run1_train_loss.dat"), "1 2\n");
  EXPECT_EQ(read_file(plots / "run1_val_loss.dat"), "");  // written, but not drawn
  EXPECT_EQ(read_file(plots / "throughput0.dat"), "1 100 \"1.00\"\n2 180 \"0.90\"\n4 300 \"0.75\"\n");
  EXPECT_EQ(read_file(plots / "ideal0.dat"), "1 100\n2 200\n4 400\n");
  EXPECT_EQ(read_file(plots / "time0.dat"), "1 8\n2 4.5\n");
  EXPECT_EQ(read_file(plots / "ideal_time0.dat"), "1 8\n2 4\n");
  EXPECT_EQ(read_file(plots / "comm_bytes.dat"),
            "\"one (local)\" 0\n\"two (data_parallel)\" 0.8\n\"slow_two (data_parallel)\" 0\n"
            "\"four (data_parallel)\" 0\n\"lenet (data_parallel)\" 0\n");
  const auto text = read_file(script.path);
  EXPECT_EQ(script.path, plots / "plots.gp");
  EXPECT_EQ(text.rfind("set terminal pngcairo", 0), 0u) << text;
  const std::string loss =
      "set output '" + (plots / "loss.png").string() + "'\nset title 'Loss against step'\n";
  EXPECT_NE(text.find(loss), std::string::npos) << text;
  EXPECT_NE(
      text.find("plot '" + (plots / "run0_train_loss.dat").string() +
                "' using 1:2 with lines lw 2 title 'one train', '" + (plots / "run0_val_loss.dat").string() +
                "' using 1:2 with linespoints lw 2 title 'one validation', '" +
                (plots / "run1_train_loss.dat").string() + "' using 1:2 with lines lw 2 title 'two train'\n"),
      std::string::npos)
      << text;
  EXPECT_LT(text.find("set xtics 1\n"), text.find("loss_epoch.png"));  // two epochs: a tic each
  EXPECT_EQ(text.find("top5"), std::string::npos) << text;
}

TEST_F(ReportTest, OneWorkerRunsHaveNoScalingOrCommunicationFigures) {
  const std::vector<ReportRun> runs{run("a", results("mlp", 1, 10), {{{"step", 1}, {"train/loss", 1.0}}})};
  const auto script = write_plot_script(runs, dir_);
  ASSERT_EQ(script.figures.size(), 2u);
  EXPECT_EQ(script.figures[0].png, "loss.png");
  EXPECT_EQ(script.figures[1].png, "loss_time.png");  // no wall_time: at 0 s
  EXPECT_FALSE(fs::exists(dir_ / "throughput0.dat"));
  EXPECT_FALSE(fs::exists(dir_ / "comm_bytes.dat"));
}

TEST_F(ReportTest, GnuplotStringsDoubleTheirQuotes) {
  EXPECT_EQ(gnuplot_quoted("it's"), "it''s");
  EXPECT_EQ(plot_command("a.png", "t", "x", "y", {{"d'1", "c", "labels offset 0,1"}}),
            "set output 'a.png'\nset title 't'\nset xlabel 'x'\nset ylabel 'y'\nset key outside right top\n"
            "set grid\nplot 'd''1' using 1:2:3 with labels offset 0,1\n");
}

TEST_F(ReportTest, Base64IsRfc4648) {
  EXPECT_EQ(base64(""), "");
  EXPECT_EQ(base64("f"), "Zg==");
  EXPECT_EQ(base64("fo"), "Zm8=");
  EXPECT_EQ(base64("foo"), "Zm9v");
  EXPECT_EQ(base64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64(std::string("\x89PNG\r\n\x1a\n\xff", 9)), "iVBORw0KGgr/");
}

ReportPage small_page() {
  ReportPage page;
  page.title = "dtrain report: x";
  page.runs = {{"run", "samples/s"}, {"a", "100"}};
  page.figures = {{"loss.png", "Loss against step"}, {"top1.png", "Top-1 accuracy against step"}};
  return page;
}

TEST_F(ReportTest, TheMarkdownPageLinksTheFigures) {
  auto page = small_page();
  EXPECT_EQ(markdown_page(page),
            "# dtrain report: x\n\n## Runs\n\n| run | samples/s |\n|---|---|\n| a | 100 |\n\n## Figures\n\n"
            "![Loss against step](plots/loss.png)\n\n![Top-1 accuracy against step](plots/top1.png)\n\n");
  page.throughput = Table{{"model", "fp32, 1 worker (samples/s)"}, {"mlp", "100"}};
  EXPECT_NE(markdown_page(page).find("\n## Throughput: model x batch against precision x workers\n\n"
                                     "| model | fp32, 1 worker (samples/s) |\n|---|---|\n| mlp | 100 |\n"),
            std::string::npos);
}

TEST_F(ReportTest, TheHtmlPageEmbedsEveryFigureAndReferencesNothingOutside) {
  const std::string loss("\x89PNG\r\n\x1a\nloss", 12), top1("\x89PNG\r\n\x1a\ntop-1!", 14);
  write("loss.png", loss);
  write("top1.png", top1);
  const auto html = html_page(small_page(), dir_);
  EXPECT_NE(html.find("<table>\n<tr><th>run</th><th>samples/s</th></tr>\n<tr><td>a</td><td>100</td></tr>\n"
                      "</table>\n"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<img alt=\"Loss against step\" src=\"data:image/png;base64," + base64(loss) + "\">"),
            std::string::npos);
  EXPECT_NE(html.find("<img alt=\"Top-1 accuracy against step\" src=\"data:image/png;base64," + base64(top1) +
                      "\">"),
            std::string::npos);
  for (const char* outside : {"http:", "https:", "src=\"plots/", "href=", "<link", "<script"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
  fs::remove(dir_ / "top1.png");
  EXPECT_THROW(html_page(small_page(), dir_), std::runtime_error);
}

// The whole report through gnuplot: every figure report.md links is a PNG, embedded in
// report.html byte for byte.
TEST_F(ReportTest, TheReportEmbedsEveryPngItDrew) {
  std::vector<std::pair<std::string, json>> runs{{"one", results("mlp", 1, 100)},
                                                 {"two", results("mlp", 2, 180)}};
  write_experiment(runs);
  write(fs::path("one") / "metrics.jsonl",
        "{\"step\": 1, \"epoch\": 1, \"wall_time\": 1.0, \"train/loss\": 2.5, \"val/top1\": 0.2}\n"
        "{\"step\": 2, \"epoch\": 2, \"wall_time\": 2.0, \"train/loss\": 2.0, \"val/top1\": 0.4}\n");
  const auto md_path = write_report(dir_);
  EXPECT_EQ(md_path, dir_ / "report.md");
  const auto md = read_file(md_path);
  const auto html = read_file(dir_ / "report.html");
  EXPECT_EQ(md.rfind("# dtrain report: " + dir_.filename().string() + "\n", 0), 0u) << md;
  EXPECT_NE(md.find("| two | data_parallel | gloo | 2 | mlp | 10 | 0.5000 | 0.9000 | 1.2500 | 180 | 0.90 |"),
            std::string::npos)
      << md;
  std::vector<std::string> pngs;
  for (std::size_t at = md.find("](plots/"); at != std::string::npos; at = md.find("](plots/", at + 1)) {
    const auto png = md.substr(at + 8, md.find(')', at) - at - 8);
    const auto bytes = read_file(dir_ / "plots" / png);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << png;
    EXPECT_NE(html.find("src=\"data:image/png;base64," + base64(bytes) + "\""), std::string::npos) << png;
    pngs.push_back(png);
  }
  // What was logged: train loss and validation top-1; no training times, so no training-time figure.
  EXPECT_EQ(pngs,
            (std::vector<std::string>{"loss.png", "top1.png", "top1_epoch.png", "loss_time.png",
                                      "top1_time.png", "throughput.png", "comm_bytes.png", "comm_wait.png"}));
  EXPECT_EQ(html.find("http"), std::string::npos);
}

TEST_F(ReportTest, AFailingGnuplotIsAnErrorThatSaysSo) {
  write("results.json", results("mlp", 1, 100).dump());
  write("metrics.jsonl", "{\"step\": 1, \"train/loss\": 2.5}\n");
  ReportOptions options;
  options.gnuplot = "false";
  try {
    write_report(dir_, options);
    FAIL() << "gnuplot failed, the report did not";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gnuplot failed"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "report.md"));
}

}  // namespace
}  // namespace dtrain::experiment
