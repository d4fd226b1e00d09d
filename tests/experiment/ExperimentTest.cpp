// Experiments: sweep expansion, file errors, and a tiny experiment through the real binary —
// identical initial weights across runs, and a rerun that skips finished runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "dtrain/config/ConfigError.h"
#include "dtrain/experiment/Experiment.h"
#include "dtrain/experiment/Report.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

class ExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dtrain-experiment-test-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "base.yaml")
        << "name: tiny\nnproc: 1\n"
           "data: {dataset: synthetic, synthetic_shape: [1, 6, 6], synthetic_classes: 3,\n"
           "       synthetic_size: 96, batch_size: 16, test_subset_size: 16}\n"
           "model: {name: mlp, hidden: [8]}\n"
           "optim: {name: sgd, lr: 0.1}\n"
           "parallel: {strategy: local}\n"
           "train: {epochs: 1, log_every_steps: 100, seed: 5}\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static ExperimentOptions options() {
    ExperimentOptions o;
    o.dtrain_executable = DTRAIN_BINARY;
    return o;
  }

  // The file starts with PNG's signature.
  static bool is_png(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    std::string magic(8, '\0');
    f.read(magic.data(), 8);
    return magic == std::string("\x89PNG\r\n\x1a\n", 8);
  }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

  fs::path dir_;
};

TEST_F(ExperimentTest, SweepIsTheCartesianProductForEveryRun) {
  const auto spec =
      load_experiment(write("e.yaml",
                            "name: s\nbase: base.yaml\noverrides: [train.epochs=1]\n"
                            "runs:\n  - {name: a, overrides: [optim.lr=0.1]}\n  - {name: b}\n"
                            "sweep:\n  model.name: [mlp, lenet5]\n  data.batch_size: [8, 16, 32]\n"));
  const auto runs = expand_runs(spec);
  ASSERT_EQ(runs.size(), 2u * 2 * 3);
  EXPECT_EQ(runs[0].name, "a__model.name=mlp,data.batch_size=8");
  EXPECT_EQ(runs[0].overrides, (std::vector<std::string>{"train.epochs=1", "optim.lr=0.1", "model.name=mlp",
                                                         "data.batch_size=8"}));
  EXPECT_EQ(runs[5].name, "a__model.name=lenet5,data.batch_size=32");
  EXPECT_EQ(runs[6].name, "b__model.name=mlp,data.batch_size=8");
  EXPECT_EQ(runs[6].overrides,
            (std::vector<std::string>{"train.epochs=1", "model.name=mlp", "data.batch_size=8"}));
  EXPECT_EQ(spec.base, dir_ / "base.yaml");
}

TEST_F(ExperimentTest, NoRunsMeansOneBaseRun) {
  const auto runs = expand_runs(load_experiment(write("e.yaml", "base: base.yaml\n")));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "base");
}

TEST_F(ExperimentTest, FileErrorsNameLineAndKey) {
  try {
    load_experiment(write("e.yaml", "base: base.yaml\nrunz: []\n"));
    FAIL() << "accepted an unknown key";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("e.yaml:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runz"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_experiment(write("f.yaml", "name: x\n")), config::ConfigError);  // no base
  EXPECT_THROW(load_experiment(write("g.yaml", "base: base.yaml\nruns:\n  - {name: a}\n  - {name: a}\n")),
               config::ConfigError);
}

TEST_F(ExperimentTest, BadOverrideFailsBeforeAnyRunStarts) {
  const auto spec = load_experiment(write("e.yaml", "base: base.yaml\nout_dir: " + (dir_ / "out").string() +
                                                        "\nruns:\n  - {name: ok}\n"
                                                        "  - {name: bad, overrides: [optim.name=warp]}\n"));
  const auto options = this->options();
  try {
    run_experiment(spec, options);
    FAIL() << "accepted optim.name=warp";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("run 'bad'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(ExperimentTest, RunsShareInitialWeightsAndARerunSkipsFinishedRuns) {
  const auto spec =
      load_experiment(write("e.yaml", "name: tiny-exp\nbase: base.yaml\nout_dir: " + (dir_ / "out").string() +
                                          "\nruns:\n  - {name: sgd}\n"
                                          "  - {name: adam, overrides: [optim.name=adam, optim.lr=0.01]}\n"
                                          "sweep:\n  data.batch_size: [8, 16]\n"));
  const auto options = this->options();
  const auto first = run_experiment(spec, options);
  ASSERT_EQ(first["runs"].size(), 4u);
  const fs::path dir = first["directory"].get<std::string>();
  EXPECT_TRUE(fs::exists(dir / "experiment.yaml"));
  EXPECT_TRUE(fs::exists(dir / "results.json"));
  std::set<std::string> hashes, partitions;
  for (const auto& run : first["runs"]) {
    EXPECT_FALSE(run["skipped"].get<bool>());
    hashes.insert(run["results"]["initial_parameter_hash"].get<std::string>());
    partitions.insert(run["results"]["data_partition_hash"].get<std::string>());
    EXPECT_TRUE(fs::exists(dir / run["name"].get<std::string>() / "config.yaml"));
  }
  EXPECT_EQ(hashes.size(), 1u);
  EXPECT_EQ(partitions.size(), 1u);  // one worker each: every run trained on the same samples
  EXPECT_TRUE(first["data_partitions_identical"].get<bool>());
  EXPECT_EQ(first["runs"][2]["results"]["config"]["optim"]["name"], "adam");

  // Interrupt one run (its results are gone): the same command finishes only that one.
  fs::remove(dir / first["runs"][1]["name"].get<std::string>() / "results.json");
  fs::remove(dir / "results.json");
  const auto second = run_experiment(spec, options);
  EXPECT_EQ(second["directory"], first["directory"]);
  int skipped = 0;
  for (const auto& run : second["runs"]) skipped += run["skipped"].get<bool>();
  EXPECT_EQ(skipped, 3);
  EXPECT_FALSE(second["runs"][1]["skipped"].get<bool>());

  // The report: the run table, valid PNG figures, and an HTML page that needs no network.
  const auto report = write_report(dir);
  std::ifstream md_file(report);
  const std::string md((std::istreambuf_iterator<char>(md_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(md.find("| run | strategy | backend | workers |"), std::string::npos) << md;
  EXPECT_NE(md.find("| adam__data.batch_size=8 |"), std::string::npos) << md;
  for (const auto* png : {"loss.png", "top1.png", "top5.png", "top1_time.png"}) {
    EXPECT_TRUE(is_png(dir / "plots" / png)) << png;
    EXPECT_NE(md.find(std::string("plots/") + png), std::string::npos) << png;
  }
  std::ifstream html_file(dir / "report.html");
  const std::string html((std::istreambuf_iterator<char>(html_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("data:image/png;base64,iVBORw0KGgo"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src=\"plots/"), std::string::npos);
}

TEST_F(ExperimentTest, ReportDrawsEpochCurvesScalingAndCommunication) {
  const auto spec = load_experiment(
      write("e.yaml", "name: scaling\nbase: base.yaml\nout_dir: " + (dir_ / "out").string() +
                          "\noverrides: [train.epochs=2]\nruns:\n  - {name: local}\n"
                          "  - {name: dp2, overrides: [nproc=2, parallel.strategy=data_parallel]}\n"));
  const auto options = this->options();
  const auto result = run_experiment(spec, options);
  ASSERT_EQ(result["runs"].size(), 2u);
  const fs::path dir = result["directory"].get<std::string>();
  std::ifstream md_file(write_report(dir));
  const std::string md((std::istreambuf_iterator<char>(md_file)), std::istreambuf_iterator<char>());
  for (const auto* png :
       {"loss_epoch.png", "top1_epoch.png", "top5_epoch.png", "loss_time.png", "top5_time.png",
        "throughput.png", "training_time.png", "comm_bytes.png", "comm_wait.png"}) {
    EXPECT_TRUE(is_png(dir / "plots" / png)) << png;
    EXPECT_NE(md.find(std::string("plots/") + png), std::string::npos) << png;
  }
  // Seed 003's table: model x batch rows against precision x workers columns.
  EXPECT_NE(
      md.find("| model | batch per worker | fp32, 1 worker (samples/s) | fp32, 2 workers (samples/s) |"),
      std::string::npos)
      << md;
  EXPECT_EQ(result["runs"][1]["results"]["precision"], "fp32");
  // Both epochs of both runs are on the epoch curves: train and validation, two points each.
  for (const auto* series : {"run0_train_top1_epoch.dat", "run1_val_top1_epoch.dat"}) {
    std::ifstream f(dir / "plots" / series);
    int epoch = 0;
    double value = 0;
    std::vector<int> epochs;
    while (f >> epoch >> value) epochs.push_back(epoch);
    EXPECT_EQ(epochs, (std::vector<int>{1, 2})) << series;
  }
  // The measured throughput points carry the scaling efficiency: 1.00 for one worker.
  std::ifstream throughput(dir / "plots" / "throughput0.dat");
  const std::string points((std::istreambuf_iterator<char>(throughput)), std::istreambuf_iterator<char>());
  EXPECT_NE(points.find("1 "), std::string::npos) << points;
  EXPECT_NE(points.find("\"1.00\""), std::string::npos) << points;
  // Communication per step: the local run communicates nothing, dp2 all-reduces every step.
  std::ifstream bytes(dir / "plots" / "comm_bytes.dat");
  std::string line;
  std::getline(bytes, line);
  EXPECT_NE(line.find("\"local (local)\" 0"), std::string::npos) << line;
  std::getline(bytes, line);
  EXPECT_NE(line.find("\"dp2 (data_parallel)\" "), std::string::npos) << line;
  EXPECT_GT(std::stod(line.substr(line.rfind(' ') + 1)), 0.0) << line;
}

}  // namespace
}  // namespace dtrain::experiment
