// Experiments: sweep expansion, file errors, the checks that runs are comparable, a caller's own
// workers that the runner keeps going past when they refuse or fail, and tiny experiments through
// the real binary: identical initial weights across runs, each run's config.yaml naming the
// experiment folder as its out_dir, a rerun that skips finished runs, and a report whose numbers are
// the runs' own.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/experiment/Experiment.h"
#include "dtrain/experiment/ExperimentChecks.h"
#include "dtrain/experiment/Report.h"
#include "dtrain/experiment/ReportPage.h"
#include "dtrain/io/JsonFile.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::read_file;

// The message of what `f` throws as E ("" when it throws nothing).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

class ExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "base.yaml")
        << "name: tiny\nnproc: 1\n"
           "data: {dataset: synthetic, synthetic_shape: [1, 6, 6], synthetic_classes: 3,\n"
           "       synthetic_size: 96, batch_size: 16, test_subset_size: 16}\n"
           "model: {name: mlp, hidden: [8]}\n"
           "optim: {name: sgd, lr: 0.1}\n"
           "parallel: {strategy: local}\n"
           "train: {epochs: 1, log_every_steps: 100, seed: 5}\n";
  }

  static ExperimentOptions options() {
    ExperimentOptions o;
    o.dtrain_executable = DTRAIN_BINARY;
    return o;
  }

  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }

  dtrain::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path();
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
  const auto runs = expand_runs(load_experiment(write("e.yaml", "base: base.yaml\noverrides: [nproc=2]\n")));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "base");
  EXPECT_EQ(runs[0].overrides, (std::vector<std::string>{"nproc=2"}));
  // A sweep alone sweeps the base run; values that are not plain text are made folder-safe.
  const auto swept =
      expand_runs(load_experiment(write("s.yaml", "base: base.yaml\nsweep:\n  model.hidden: [[8, 4]]\n")));
  ASSERT_EQ(swept.size(), 1u);
  EXPECT_EQ(swept[0].name, "base__model.hidden=_8,_4_");
  EXPECT_EQ(swept[0].overrides, (std::vector<std::string>{"model.hidden=[8, 4]"}));
}

TEST_F(ExperimentTest, FileErrorsNameLineAndKey) {
  try {
    load_experiment(write("e.yaml", "base: base.yaml\nrunz: []\n"));
    FAIL() << "accepted an unknown key";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("e.yaml:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runz"), std::string::npos) << e.what();
  }
  const auto no_base = error_of<config::ConfigError>([&] { load_experiment(write("f.yaml", "name: x\n")); });
  EXPECT_NE(no_base.find("base: missing"), std::string::npos) << no_base;
  const auto twice = error_of<config::ConfigError>(
      [&] { load_experiment(write("g.yaml", "base: base.yaml\nruns:\n  - {name: a}\n  - {name: a}\n")); });
  EXPECT_NE(twice.find("g.yaml:4"), std::string::npos) << twice;
  EXPECT_NE(twice.find("duplicate run name 'a'"), std::string::npos) << twice;
  const auto bad_name = error_of<config::ConfigError>(
      [&] { load_experiment(write("h.yaml", "base: base.yaml\nruns:\n  - {name: a/b}\n")); });
  EXPECT_NE(bad_name.find("h.yaml:3"), std::string::npos) << bad_name;
  EXPECT_NE(bad_name.find("runs.name"), std::string::npos) << bad_name;
  const auto empty_sweep = error_of<config::ConfigError>(
      [&] { load_experiment(write("i.yaml", "base: base.yaml\nsweep:\n  optim.lr: []\n")); });
  EXPECT_NE(empty_sweep.find("sweep.optim.lr"), std::string::npos) << empty_sweep;
}

TEST_F(ExperimentTest, NamesStayInsideOutDirAndRunsIsNeverEmpty) {
  for (const std::string name : {"../escape", "..", "a/b"}) {
    const auto error = error_of<config::ConfigError>(
        [&] { load_experiment(write("n.yaml", "name: '" + name + "'\nbase: base.yaml\n")); });
    EXPECT_NE(error.find("n.yaml:1: name: expected a name of letters"), std::string::npos)
        << name << ": " << error;
  }
  const auto dots = error_of<config::ConfigError>(
      [&] { load_experiment(write("d.yaml", "base: base.yaml\nruns:\n  - {name: '..'}\n")); });
  EXPECT_NE(dots.find("d.yaml:3: runs.name"), std::string::npos) << dots;
  const auto empty =
      error_of<config::ConfigError>([&] { load_experiment(write("r.yaml", "base: base.yaml\nruns: []\n")); });
  EXPECT_NE(empty.find("r.yaml:2: runs: an empty list"), std::string::npos) << empty;
}

// A finished run as the checks see it: model, data seed, batch and workers, and the two hashes.
FinishedRun finished_run(const std::string& name, const std::string& model, std::uint64_t seed, int workers,
                         const std::string& weights, const std::string& partition, int batch = 16) {
  FinishedRun run;
  run.name = name;
  run.config.model.name = model;
  run.config.data.dataset = "synthetic";
  run.config.data.batch_size = batch;
  run.config.train.seed = seed;
  run.results = {
      {"world_size", workers}, {"initial_parameter_hash", weights}, {"data_partition_hash", partition}};
  return run;
}

// A run's workers write into <experiment folder>/<run> and are told that folder as out_dir (quoted
// where YAML would read the path as something else), after the run's own overrides.
TEST_F(ExperimentTest, WorkersAreToldTheExperimentFolderAsTheirOutDir) {
  const RunSpec run{"dp2", {"nproc=2", "out_dir=elsewhere"}};
  const auto overrides = worker_overrides(run, "runs/20250101-120000_scaling");
  EXPECT_EQ(overrides, (std::vector<std::string>{"nproc=2", "out_dir=elsewhere",
                                                 "out_dir=runs/20250101-120000_scaling"}));
  const fs::path odd = dir_ / "a: [b" / "20250101-120000_scaling";
  const auto cfg = config::parse_run_config("", "<test>", worker_overrides(run, odd));
  EXPECT_EQ(cfg.out_dir, odd.string());
}

TEST_F(ExperimentTest, RunsOfOneModelMustStartFromTheSameWeights) {
  std::vector<FinishedRun> runs{finished_run("a", "mlp", 1, 1, "w1", "p1"),
                                finished_run("b", "mlp", 1, 2, "w1", "p2", 32),
                                finished_run("c", "lenet5", 1, 1, "w2", "p1")};
  EXPECT_NO_THROW(check_initial_weights(runs));
  runs.push_back(finished_run("d", "mlp", 2, 1, "w3", "p3"));
  const auto error = error_of<std::runtime_error>([&] { check_initial_weights(runs); });
  EXPECT_NE(
      error.find("runs 'a' and 'd' use the same model but started from different weights (w1 against w3)"),
      std::string::npos)
      << error;
}

TEST_F(ExperimentTest, RunsOfTheSameDataSeedAndWorkersMustSplitItTheSameWay) {
  std::vector<FinishedRun> runs{finished_run("a", "mlp", 1, 1, "w", "p1"),
                                finished_run("b", "lenet5", 1, 1, "v", "p1", 64),  // batching aside
                                finished_run("c", "mlp", 1, 2, "w", "p2"),
                                finished_run("d", "mlp", 2, 1, "w", "p3")};
  EXPECT_NO_THROW(check_data_partitions(runs));
  runs.push_back(finished_run("e", "mlp", 1, 2, "w", "p4", 32));
  const auto error = error_of<std::runtime_error>([&] { check_data_partitions(runs); });
  EXPECT_NE(error.find("runs 'c' and 'e' have the same data, seed and workers but split the training set "
                       "differently (p2 against p4)"),
            std::string::npos)
      << error;
}

// Runs of two models share the base file's model.hidden (mlp's): lenet5's run goes without it. A
// model key that no run's model reads is refused before any run starts, naming the first run given it.
TEST_F(ExperimentTest, AModelKeyNoRunsModelReadsFailsBeforeAnyRunStarts) {
  const auto spec = load_experiment(write("e.yaml", "base: base.yaml\nout_dir: " + (dir_ / "out").string() +
                                                        "\noverrides: [model.patch=7]\n"
                                                        "sweep:\n  model.name: [mlp, lenet5]\n"));
  const auto options = this->options();
  try {
    run_experiment(spec, options);
    FAIL() << "accepted model.patch with mlp and lenet5";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("run 'base__model.name=mlp': model.patch: model mlp does not read it"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "out"));
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

// A caller's own workers (shell commands here): with keep_going, a run whose graph nodes cannot be
// spread over its workers is refused before any worker starts, one whose worker exits 3 is recorded
// as failed with the launcher's account, and the runs after them still run; each run is announced
// before it starts and reported after it ends, in run order.
TEST_F(ExperimentTest, KeepGoingRecordsRefusedAndFailedRunsAndGoesOn) {
  const auto spec = load_experiment(write(
      "e.yaml",
      "name: own\nbase: base.yaml\noverrides: [parallel.backend=gloo]\nruns:\n  - {name: a}\n"
      "  - {name: nodes, overrides: [nproc=2, parallel.strategy=decentralized, parallel.graph.nodes=3]}\n"
      "  - {name: exits}\n  - {name: d}\n"));
  ExperimentOptions options;
  options.directory = dir_ / "out";
  options.keep_going = true;
  options.workers_output_to_file = true;
  options.worker_command = [](std::size_t index, const RunSpec& run, const fs::path& run_dir) {
    const std::string script =
        index == 2 ? "echo dying >&2; exit 3"
                   : "echo '{\"run\": \"" + run.name + "\"}' > " + (run_dir / "results.json").string();
    return std::vector<std::string>{"/bin/sh", "-c", script};
  };
  std::vector<std::string> calls;
  options.before_run = [&](std::size_t index, const RunSpec& run) {
    calls.push_back(fmt::format("before {} {}", index, run.name));
  };
  options.after_run = [&](std::size_t index, const RunSpec&, const RunOutcome& outcome) {
    calls.push_back(fmt::format("after {} {}", index, outcome.status));
  };
  const auto all = run_experiment(spec, options);
  EXPECT_EQ(calls,
            (std::vector<std::string>{"before 0 a", "after 0 ok", "before 1 nodes", "after 1 refused",
                                      "before 2 exits", "after 2 failed", "before 3 d", "after 3 ok"}));
  ASSERT_EQ(all["runs"].size(), 4u);
  EXPECT_EQ(all["runs"][0]["status"], "ok");
  EXPECT_FALSE(all["runs"][0].contains("reason"));
  EXPECT_EQ(all["runs"][0]["results"]["run"], "a");
  EXPECT_EQ(all["runs"][1]["status"], "refused");
  const auto refusal = all["runs"][1]["reason"].get<std::string>();
  EXPECT_NE(refusal.find('3'), std::string::npos) << refusal;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "nodes" / "launch.log"));  // no worker started
  EXPECT_EQ(all["runs"][2]["status"], "failed");
  const auto failure = all["runs"][2]["reason"].get<std::string>();
  EXPECT_NE(failure.find("failed with exit code 3"), std::string::npos) << failure;
  EXPECT_EQ(failure.find('\n'), std::string::npos) << failure;
  EXPECT_NE(read_file(dir_ / "out" / "exits" / "launch.log").find("dying"), std::string::npos);
  EXPECT_EQ(all["runs"][3]["results"]["run"], "d");
  EXPECT_TRUE(all["complete"].get<bool>());
  EXPECT_EQ(io::read_json_file(dir_ / "out" / "results.json"), all);

  // Without keep_going the failing run ends the experiment, naming it.
  options.keep_going = false;
  options.directory = dir_ / "out2";
  const auto error = error_of<std::runtime_error>([&] { run_experiment(spec, options); });
  EXPECT_NE(error.find("experiment run 'exits' failed with exit code"), std::string::npos) << error;
}

// Every figure report.md links is a PNG in plots/, embedded byte for byte in report.html, which
// refers to nothing outside itself.
void expect_self_contained(const fs::path& dir, const std::string& md, const std::string& html,
                           const std::vector<std::string>& expected_figures) {
  std::set<std::string> figures;
  for (std::size_t at = md.find("](plots/"); at != std::string::npos; at = md.find("](plots/", at + 1)) {
    const auto png = md.substr(at + 8, md.find(')', at) - at - 8);
    const auto bytes = read_file(dir / "plots" / png);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << png;
    EXPECT_NE(html.find("src=\"data:image/png;base64," + base64(bytes) + "\""), std::string::npos) << png;
    figures.insert(png);
  }
  for (const auto& png : expected_figures) EXPECT_EQ(figures.count(png), 1u) << png;
  for (const char* outside : {"http:", "https:", "src=\"plots/", "href="}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
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
  EXPECT_EQ(read_file(dir / "experiment.yaml"), spec.source_text);
  EXPECT_EQ(io::read_json_file(dir / "results.json"), first);
  EXPECT_TRUE(first["complete"].get<bool>());
  const auto expected = expand_runs(spec);
  std::set<std::string> hashes, partitions;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& run = first["runs"][i];
    EXPECT_EQ(run["name"], expected[i].name);
    EXPECT_EQ(run["overrides"].get<std::vector<std::string>>(), expected[i].overrides);
    EXPECT_FALSE(run["skipped"].get<bool>());
    EXPECT_EQ(run["results"], io::read_json_file(dir / expected[i].name / "results.json"));
    EXPECT_EQ(run["results"]["config"]["data"]["batch_size"], i % 2 == 0 ? 8 : 16) << expected[i].name;
    hashes.insert(run["results"]["initial_parameter_hash"].get<std::string>());
    partitions.insert(run["results"]["data_partition_hash"].get<std::string>());
  }
  EXPECT_EQ(hashes.size(), 1u);
  EXPECT_EQ(partitions.size(), 1u);  // one worker each: every run trained on the same samples
  EXPECT_TRUE(first["initial_weights_identical"].get<bool>());
  EXPECT_TRUE(first["data_partitions_identical"].get<bool>());
  EXPECT_EQ(first["runs"][2]["results"]["config"]["optim"]["name"], "adam");
  EXPECT_EQ(first["runs"][2]["results"]["config"]["optim"]["lr"], 0.01);
  EXPECT_EQ(first["runs"][0]["results"]["config"]["optim"]["name"], "sgd");
  // Each run's config.yaml names the folder its run folder is in, where the base file says nothing.
  for (const auto& run : expected) {
    EXPECT_EQ(config::load_run_config((dir / run.name / "config.yaml").string()).out_dir, dir.string())
        << run.name;
  }

  // Interrupt one run (its results are gone): the same command finishes only that one.
  fs::remove(dir / expected[1].name / "results.json");
  fs::remove(dir / "results.json");
  const auto second = run_experiment(spec, options);
  EXPECT_EQ(second["directory"], first["directory"]);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(second["runs"][i]["skipped"].get<bool>(), i != 1) << expected[i].name;
    if (i != 1) {
      EXPECT_EQ(second["runs"][i]["results"], first["runs"][i]["results"]) << expected[i].name;
    }
  }
  EXPECT_TRUE(fs::exists(dir / expected[1].name / "results.json"));

  // The report: a row per run with that run's numbers (scaling efficiency against the fastest, as
  // all four are one-worker mlp runs), valid PNG figures, and an HTML page that needs no network.
  const auto md = read_file(write_report(dir));
  double fastest = 0;
  for (const auto& run : second["runs"])
    fastest = std::max(fastest, run["results"]["samples_per_second"].get<double>());
  for (const auto& run : second["runs"]) {
    const auto& r = run["results"];
    const double sps = r["samples_per_second"].get<double>();
    const auto row = fmt::format(
        "| {} | local | {} | 1 | mlp | {} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.0f} | {:.2f} |",
        run["name"].get<std::string>(), r["backend"].get<std::string>(), r["steps"].get<int>(),
        r["final"]["top1"].get<double>(), r["final"]["top5"].get<double>(), r["final"]["mcc"].get<double>(),
        r["final"]["loss"].get<double>(), sps, sps / fastest);
    EXPECT_NE(md.find(row), std::string::npos) << row << "\n" << md;
  }
  // One model, two batch sizes, one worker count: the throughput table has a row per batch size.
  EXPECT_NE(md.find("| model | batch per worker | fp32, 1 worker (samples/s) |\n|---|---|---|\n| mlp | 8 | "),
            std::string::npos)
      << md;
  expect_self_contained(dir, md, read_file(dir / "report.html"),
                        {"loss.png", "top1.png", "top5.png", "top1_time.png"});
}

// `os << value`, as the plots' data files write numbers.
std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
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
  const auto md = read_file(write_report(dir));
  expect_self_contained(
      dir, md, read_file(dir / "report.html"),
      {"loss_epoch.png", "top1_epoch.png", "top5_epoch.png", "loss_time.png", "top5_time.png",
       "throughput.png", "training_time.png", "comm_bytes.png", "comm_wait.png"});
  const auto& local = result["runs"][0]["results"];
  const auto& dp2 = result["runs"][1]["results"];
  EXPECT_EQ(dp2["world_size"], 2);
  EXPECT_EQ(dp2["precision"], "fp32");
  const double one = local["samples_per_second"].get<double>();
  const double two = dp2["samples_per_second"].get<double>();
  ASSERT_GT(one, 0.0);
  // The Horovod/FSDP/pipeline study's table: model x batch rows against precision x workers columns, cells
  // samples/s.
  EXPECT_NE(md.find(fmt::format("| model | batch per worker | fp32, 1 worker (samples/s) | fp32, 2 workers "
                                "(samples/s) |\n|---|---|---|---|\n| mlp | 16 | {:.0f} | {:.0f} |\n",
                                one, two)),
            std::string::npos)
      << md;
  // The run table's scaling efficiency: dp2's throughput over twice the local run's.
  EXPECT_NE(md.find(fmt::format("| {:.0f} | {:.2f} |", two, two / (2 * one))), std::string::npos) << md;
  // Both epochs of both runs are on the epoch curves: train and validation, two points each.
  for (const auto* series : {"run0_train_top1_epoch.dat", "run1_val_top1_epoch.dat"}) {
    std::ifstream f(dir / "plots" / series);
    int epoch = 0;
    double value = 0;
    std::vector<int> epochs;
    while (f >> epoch >> value) epochs.push_back(epoch);
    EXPECT_EQ(epochs, (std::vector<int>{1, 2})) << series;
  }
  // The measured throughput points carry the scaling efficiency; the ideal line is N x one worker.
  EXPECT_EQ(read_file(dir / "plots" / "throughput0.dat"),
            fmt::format("1 {} \"1.00\"\n2 {} \"{:.2f}\"\n", number(one), number(two), two / (2 * one)));
  EXPECT_EQ(read_file(dir / "plots" / "ideal0.dat"),
            fmt::format("1 {}\n2 {}\n", number(one), number(2 * one)));
  // Communication per step: the local run communicates nothing; dp2 hands its results' bytes over
  // its steps to collectives, at least one all-reduce of every fp32 gradient per step.
  const double bytes_per_step = dp2["comm"]["total"]["bytes"].get<double>() /
                                std::max<std::int64_t>(1, dp2["steps"].get<std::int64_t>());
  EXPECT_GE(bytes_per_step, 4.0 * dp2["parameters"].get<double>());
  std::ifstream bytes(dir / "plots" / "comm_bytes.dat");
  std::string line;
  std::getline(bytes, line);
  EXPECT_EQ(line, "\"local (local)\" 0");
  std::getline(bytes, line);
  EXPECT_EQ(line, "\"dp2 (data_parallel)\" " + number(bytes_per_step / 1e6));
}

}  // namespace
}  // namespace dtrain::experiment
