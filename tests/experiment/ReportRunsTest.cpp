// What the report reads of a results.json's timing: the time blocked on the strategy's
// communication, from step_time.comm_s (the per-step mean) since results carry the step time
// split, and from comm_wait_seconds in results written before; the step table of the dAD paper's
// comparison; the bytes graph nodes sent, and the kind of training a run's scaling is measured in.
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

}  // namespace
}  // namespace dtrain::experiment
