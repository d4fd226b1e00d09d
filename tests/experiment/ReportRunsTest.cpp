// What the report reads of a results.json's timing: the time blocked on the strategy's
// communication, from step_time.comm_s (the per-step mean) since results carry the step time
// split, and from comm_wait_seconds in results written before.
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

TEST(ReportRuns, ResultsWrittenBeforeTheStepTimeSplitStillRead) {
  const json results{{"steps", 40}, {"compute_seconds", 1.5}, {"comm_wait_seconds", 0.2}};
  const auto run = parse_run_results(results);
  EXPECT_DOUBLE_EQ(run.comm_wait_seconds, 0.2);
  EXPECT_DOUBLE_EQ(comm_wait_ms_per_step(run), 5.0);
}

}  // namespace
}  // namespace dtrain::experiment
