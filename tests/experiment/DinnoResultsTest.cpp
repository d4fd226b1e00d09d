// The result files of DiNNO's experiment form from hand-written metrics.jsonl lines, as the
// decentralized strategy writes them: <problem_name>_results.json per problem, solo_results.json;
// writeout: false leaving nothing behind; and the use_cuda line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/Experiment.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::read_file;
using nlohmann::json;

class DinnoResultsTest : public ::testing::Test {
 protected:
  dtrain::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path();
};

TEST_F(DinnoResultsTest, WriteoutFalseLeavesNothingBehind) {
  ExperimentSpec spec;
  spec.name = "quiet";
  spec.out_dir = (dir_ / "outputs").string();
  // Refused before any run starts (so no process runs here, and no folder is made at all). A run
  // failing inside the temporary folder is left to the end-to-end runs once the strategy exists.
  spec.runs = {{"p", {"train.epochs=0"}}};
  spec.dinno_form = DinnoForm{};
  spec.dinno_form->nodes = 2;
  spec.dinno_form->writeout = false;
  spec.dinno_form->problems = {{"p", {"validation_loss"}}};
  const auto scratch_folders = [] {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(fs::temp_directory_path()))
      n += entry.path().filename().string().rfind("dtrain-experiment-", 0) == 0 &&
           entry.path().filename().string().size() == std::string("dtrain-experiment-XXXXXX").size();
    return n;
  };
  const int before = scratch_folders();
  ExperimentOptions options;
  options.dtrain_executable = DTRAIN_BINARY;
  EXPECT_THROW(run_experiment(spec, options), std::exception);
  EXPECT_FALSE(fs::exists(dir_ / "outputs"));
  EXPECT_EQ(scratch_folders(), before);
}

TEST_F(DinnoResultsTest, UseCudaSaysTheProblemsTrainOnTheCpu) {
  EXPECT_EQ(cuda_note(false, false), "");
  EXPECT_NE(cuda_note(true, false).find("no CUDA device is usable; the problems train on the CPU"),
            std::string::npos);
  EXPECT_NE(cuda_note(true, true).find("no GPU path; the problems train on the CPU"), std::string::npos);
}

// Two evaluations of three nodes, with a training record between them.
std::vector<MetricRecord> three_node_records() {
  std::vector<MetricRecord> records;
  for (int round : {0, 20}) {
    MetricRecord r{{"step", round},
                   {"epoch", 0},
                   {"strategy/forward_pass_count", 64.0 * round},
                   {"strategy/node_bytes_sent", 1000.0 * round},
                   {"strategy/consensus_error_min", 0.1},
                   {"strategy/consensus_error_max", 0.3}};
    for (int i = 0; i < 3; ++i) {
      const auto node = std::to_string(i);
      r["val/node" + node + "/loss"] = 2.0 - 0.01 * round - 0.1 * i;
      r["val/node" + node + "/top1"] = 0.1 + 0.01 * round + 0.1 * i;
      r["strategy/consensus/node" + node] = 0.1 * (i + 1);
      r["strategy/node" + node + "/epoch"] = round / 20 + i;
    }
    r["strategy/distance/0/1"] = 0.01;
    r["strategy/distance/0/2"] = 0.02;
    r["strategy/distance/1/2"] = 0.12;
    records.push_back(r);
    if (round == 0) records.push_back({{"step", 10}, {"train/loss", 1.5}});
  }
  return records;
}

TEST_F(DinnoResultsTest, ResultsHoldEveryListedMetricPerEvaluation) {
  const DinnoProblem problem{
      "dinno",
      {"forward_pass_count", "validation_loss", "consensus_error", "top1_accuracy", "current_epoch"}};
  const auto r = problem_results(problem, three_node_records(), 3);
  EXPECT_EQ(r["problem_name"], "dinno");
  EXPECT_EQ(r["rounds"], json({0.0, 20.0}));
  EXPECT_EQ(r["bytes"], json({0.0, 20000.0}));
  EXPECT_EQ(r["forward_pass_count"], json({0.0, 1280.0}));
  ASSERT_EQ(r["validation_loss"].size(), 2u);
  EXPECT_DOUBLE_EQ(r["validation_loss"][1][2].get<double>(), 2.0 - 0.2 - 0.2);
  EXPECT_DOUBLE_EQ(r["top1_accuracy"][0][1].get<double>(), 0.2);
  EXPECT_EQ(r["current_epoch"][1], json({1.0, 2.0, 3.0}));
  const auto& c = r["consensus_error"][0];
  EXPECT_EQ(c["distances"], json({{0.0, 0.01, 0.02}, {0.01, 0.0, 0.12}, {0.02, 0.12, 0.0}}));
  EXPECT_EQ(c["node_means"].size(), 3u);
  EXPECT_DOUBLE_EQ(c["node_means"][2].get<double>(), 0.3);
  // Only the metrics a problem lists go in.
  const auto few = problem_results({"dsgd", {"validation_loss"}}, three_node_records(), 3);
  EXPECT_FALSE(few.contains("top1_accuracy"));
  EXPECT_TRUE(few.contains("rounds"));
}

TEST_F(DinnoResultsTest, TheResultFilesAreWrittenBesideTheRuns) {
  fs::create_directories(dir_ / "p" / "solo");
  fs::create_directories(dir_ / "p" / "dinno");
  std::ofstream metrics(dir_ / "p" / "dinno" / "metrics.jsonl");
  for (const auto& r : three_node_records()) metrics << json(r).dump() << "\n";
  metrics.close();
  std::ofstream(dir_ / "p" / "solo" / "metrics.jsonl")
      << R"({"step": 5, "val/node0/loss": 0.5, "val/node0/top1": 0.8, "val/node1/loss": 0.25, "val/node1/top1": 0.9})"
      << "\n"
      << R"({"step": 10, "val/node0/loss": 0.4, "val/node0/top1": 0.85, "val/node1/loss": 0.2, "val/node1/top1": 0.95})"
      << "\n";
  DinnoForm form;
  form.nodes = 2;
  form.solo = true;
  form.problems = {{"dinno", {"validation_loss"}}};
  const auto all = write_dinno_results(form, dir_ / "p");
  const auto solo = json::parse(read_file(dir_ / "p" / "solo_results.json"));
  EXPECT_EQ(solo, json({{"0", {{"validation_loss", 0.4}, {"validation_accuracy", 0.85}}},
                        {"1", {{"validation_loss", 0.2}, {"validation_accuracy", 0.95}}}}));
  EXPECT_EQ(solo_lines(solo), "Node 0 - Validation Acc = 0.8500\nNode 1 - Validation Acc = 0.9500\n");
  EXPECT_EQ(json::parse(read_file(dir_ / "p" / "dinno_results.json")), all["dinno"]);
  EXPECT_EQ(all["dinno"]["validation_loss"][0].size(), 2u);
  // writeout: false writes nothing.
  fs::remove(dir_ / "p" / "dinno_results.json");
  form.writeout = false;
  write_dinno_results(form, dir_ / "p");
  EXPECT_FALSE(fs::exists(dir_ / "p" / "dinno_results.json"));
}

}  // namespace
}  // namespace dtrain::experiment
