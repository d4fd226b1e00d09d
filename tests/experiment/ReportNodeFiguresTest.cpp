// The report's figures for decentralized runs (DiNNO's problems): from a hand-written experiment
// folder, the mean over nodes of validation loss, top-1 and consensus error, one line per run,
// against rounds and against bytes sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/experiment/ReportFigures.h"
#include "dtrain/experiment/ReportRuns.h"
#include "dtrain/experiment/ReportSeries.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::read_file;
using nlohmann::json;

// What the report reads of a one-worker run's results.json.
json results(const std::string& model) {
  return {{"name", "run"}, {"model", model}, {"strategy", "decentralized"}, {"world_size", 1}, {"steps", 20}};
}

ReportRun run(const std::string& name, const json& r, std::vector<MetricRecord> metrics) {
  return {name, parse_run_results(r), std::move(metrics)};
}

class ReportNodeFigures : public ::testing::Test {
 protected:
  void write(const fs::path& relative, const std::string& text) {
    fs::create_directories((dir_ / relative).parent_path());
    std::ofstream(dir_ / relative) << text;
  }

  // An experiment folder: results.json listing the runs, a folder per run with its results.json.
  void write_experiment(const std::vector<std::pair<std::string, json>>& runs) {
    write("experiment.yaml", "experiment: {}\n");
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

// Two decentralized runs of two nodes (DiNNO's problems): one line per run, the mean over nodes.
TEST_F(ReportNodeFigures, DecentralizedRunsHaveNodeMeanFiguresAgainstRoundsAndBytes) {
  const auto node_record = [](double round, double loss0, double loss1) {
    return MetricRecord{{"step", round},
                        {"strategy/node_bytes_sent", 100 * round},
                        {"val/node0/loss", loss0},
                        {"val/node1/loss", loss1},
                        {"val/node0/top1", 0.5},
                        {"val/node1/top1", 0.75},
                        {"strategy/consensus/node0", 0.25},
                        {"strategy/consensus/node1", 0.75}};
  };
  write_experiment({{"dinno", results("dinnocnn")}, {"dsgd", results("dinnocnn")}});
  write("dinno/metrics.jsonl", json(node_record(0, 2.0, 3.0)).dump() + "\n" +
                                   R"({"step": 5, "train/loss": 1.0})" + "\n" +
                                   json(node_record(20, 1.0, 2.0)).dump() + "\n");
  write("dsgd/metrics.jsonl", json(node_record(0, 4.0, 4.0)).dump() + "\n");
  const auto runs = read_report_runs(dir_);
  ASSERT_EQ(runs.size(), 2u);
  const auto curve = node_mean_curve(runs[0], "step", "val/node", "/loss");
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_DOUBLE_EQ(curve[1].x, 20);
  EXPECT_DOUBLE_EQ(curve[1].y, 1.5);
  const auto plots = dir_ / "plots";
  fs::create_directories(plots);
  const auto script = write_plot_script(runs, plots);
  std::vector<std::string> pngs;
  for (const auto& f : script.figures) pngs.push_back(f.png);
  for (const char* png : {"node_loss.png", "node_top1.png", "consensus_error.png", "node_loss_bytes.png",
                          "node_top1_bytes.png", "consensus_error_bytes.png"}) {
    EXPECT_NE(std::find(pngs.begin(), pngs.end(), png), pngs.end()) << png;
  }
  EXPECT_EQ(read_file(plots / "run0_node_loss.dat"), "0 2.5\n20 1.5\n");
  EXPECT_EQ(read_file(plots / "run1_node_loss.dat"), "0 4\n");
  EXPECT_EQ(read_file(plots / "run0_consensus_error_bytes.dat"), "0 0.5\n2000 0.5\n");
  EXPECT_EQ(read_file(plots / "run0_node_top1_bytes.dat"), "0 0.625\n2000 0.625\n");
  const auto text = read_file(script.path);
  EXPECT_NE(
      text.find("plot '" + (plots / "run0_node_loss.dat").string() +
                "' using 1:2 with linespoints lw 2 title "
                "'dinno', '" +
                (plots / "run1_node_loss.dat").string() + "' using 1:2 with linespoints lw 2 title 'dsgd'\n"),
      std::string::npos)
      << text;
  // Runs without per-node evaluations have none of these figures.
  const auto plain = write_plot_script({run("a", results("mlp"), {{{"step", 1}, {"val/loss", 1.0}}})}, plots);
  for (const auto& f : plain.figures) EXPECT_EQ(f.png.find("node"), std::string::npos) << f.png;
}

}  // namespace
}  // namespace dtrain::experiment
