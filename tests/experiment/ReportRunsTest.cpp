// What the report reads of a results.json's timing: the time blocked on the strategy's
// communication, from step_time.comm_s (the per-step mean) since results carry the step time
// split, and from comm_wait_seconds in results written before; the step table of the dAD paper's
// comparison; the bytes graph nodes sent, the kind of training a run's scaling is measured in, and
// the strategy (with zero's stage) that tells the FSDP table's columns apart.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "dtrain/experiment/ReportRuns.h"
#include "dtrain/experiment/ReportTables.h"

namespace dtrain::experiment {
namespace {

using nlohmann::json;

TEST(ReportRuns, CommWaitComesFromTheStepTimeSplit) {
  const json results{
      {"steps", 40},
      {"step_time", {{"forward_s", 0.004}, {"backward_s", 0.006}, {"comm_s", 0.0025}, {"update_s", 0.001}}},
      {"bytes_per_step", 4464.0}};
  const auto run = parse_run_results(results);
  EXPECT_DOUBLE_EQ(run.comm_wait_seconds, 0.0025 * 40);
  EXPECT_DOUBLE_EQ(comm_wait_ms_per_step(run), 2.5);
}

TEST(ReportRuns, TheStepTableShowsEachRunsSplitAndWireBytes) {
  const json with_split{
      {"strategy", "rankdad"},
      {"model", "mlp"},
      {"steps", 40},
      {"final", {{"top1", 0.8125}}},
      {"step_time", {{"forward_s", 0.004}, {"backward_s", 0.006}, {"comm_s", 0.0025}, {"update_s", 0.001}}},
      {"bytes_per_step", 49656.0}};
  const json before_split{{"strategy", "data_parallel"}, {"steps", 40}, {"comm_wait_seconds", 0.2}};
  const std::vector<ReportRun> runs{{"rankdad-r4", parse_run_results(with_split), {}},
                                    {"old", parse_run_results(before_split), {}}};
  ASSERT_TRUE(shows_step_table(runs));
  const auto table = step_table(runs);
  ASSERT_EQ(table.size(), 2u);  // the header and the run that has a split
  const std::vector<std::string> row{"rankdad-r4", "rankdad", "mlp",  "0.8125", "49.7",
                                     "4.00",       "6.00",    "2.50", "1.00",   "13.50"};
  EXPECT_EQ(table[1], row);
  EXPECT_FALSE(shows_step_table({runs[1]}));
}

TEST(ReportRuns, ResultsWrittenBeforeTheStepTimeSplitStillRead) {
  const json results{{"steps", 40}, {"compute_seconds", 1.5}, {"comm_wait_seconds", 0.2}};
  const auto run = parse_run_results(results);
  EXPECT_DOUBLE_EQ(run.comm_wait_seconds, 0.2);
  EXPECT_DOUBLE_EQ(comm_wait_ms_per_step(run), 5.0);
}

// DiNNO's template on one rank: five nodes exchange in memory, so comm.total.bytes is 0, and the
// strategy's count of what each node sent is what the report reads for them.
TEST(ReportRuns, GraphNodesTrafficComesFromTheStrategysNodeBytes) {
  const json results{
      {"strategy", "decentralized"},
      {"world_size", 1},
      {"steps", 30},
      {"comm", {{"total", {{"calls", 0}, {"bytes", 0}, {"wire_bytes", 0}, {"wait_seconds", 0.0}}}}},
      {"strategy_metrics", {{"node_bytes_sent", 10920960.0}, {"consensus_error", 0.125}}},
      {"config", {{"parallel", {{"decentralized", {{"algorithm", "dsgd"}}}}}}}};
  const auto run = parse_run_results(results);
  ASSERT_TRUE(run.node_bytes_sent.has_value());
  EXPECT_EQ(*run.node_bytes_sent, 10920960.0);
  EXPECT_DOUBLE_EQ(*node_sent_mb_per_step(run), 0.364032);
  EXPECT_EQ(comm_mb_per_step(run), 0.0);
  EXPECT_EQ(run.kind, "decentralized dsgd");
  // A strategy that counts no node traffic has none; an exact strategy is of no kind beyond its model.
  const auto dp = parse_run_results(json{{"strategy", "data_parallel"}, {"steps", 30}});
  EXPECT_FALSE(dp.node_bytes_sent.has_value());
  EXPECT_FALSE(node_sent_mb_per_step(dp).has_value());
  EXPECT_EQ(dp.kind, "");
  EXPECT_EQ(parse_run_results(json{{"strategy", "rankdad"}}).kind, "rankdad");
  EXPECT_EQ(parse_run_results(json{{"strategy", "no_such_strategy"}}).kind, "no_such_strategy");
}

// The FSDP table: zero stage 3 against data_parallel on two workers, each a column of its own, the
// one-worker runs in one column as before.
TEST(ReportRuns, TheThroughputTableTellsStrategiesOnSeveralWorkersApart) {
  const auto results = [](const char* strategy, int workers, const char* precision,
                          double samples_per_second) {
    json r{{"model", "albert"},
           {"strategy", strategy},
           {"world_size", workers},
           {"precision", precision},
           {"samples_per_second", samples_per_second},
           {"config", {{"data", {{"batch_size", 8}}}, {"parallel", {{"zero", {{"stage", 3}}}}}}}};
    return ReportRun{strategy, parse_run_results(r), {}};
  };
  const std::vector<ReportRun> runs{
      results("local", 1, "fp32", 20),         results("data_parallel", 2, "fp32", 35),
      results("zero", 2, "fp32", 25),          results("zero", 2, "bf16", 22),
      results("data_parallel", 2, "bf16", 30), results("data_parallel", 2, "fp32", 31)};
  EXPECT_EQ(runs[2].results.layout, "zero stage 3");
  EXPECT_EQ(runs[1].results.layout, "data_parallel");
  const Table expected{
      {"model", "batch per worker", "bf16, data_parallel, 2 workers (samples/s)",
       "bf16, zero stage 3, 2 workers (samples/s)", "fp32, 1 worker (samples/s)",
       "fp32, data_parallel, 2 workers (samples/s)", "fp32, zero stage 3, 2 workers (samples/s)"},
      {"albert", "8", "30", "22", "20", "35", "25"}};  // the best of the two fp32 data_parallel
  EXPECT_EQ(throughput_table(runs), expected);
  // One strategy on several workers: the columns are precision and workers only, as before.
  const std::vector<ReportRun> one_strategy{runs[0], runs[1], runs[4]};
  EXPECT_EQ(throughput_table(one_strategy)[0],
            (std::vector<std::string>{"model", "batch per worker", "bf16, 2 workers (samples/s)",
                                      "fp32, 1 worker (samples/s)", "fp32, 2 workers (samples/s)"}));
}

}  // namespace
}  // namespace dtrain::experiment
