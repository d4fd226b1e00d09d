// DiNNO's experiment file (its experiment: / problem_configs:) as dtrain runs: the README's
// template and the authors' later dist_mnist_PAPER.yaml translate to the expected overrides, every
// mistake is refused at its line, and the result files are built from hand-written metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/experiment/DinnoExperiment.h"
#include "dtrain/experiment/Experiment.h"
#include "support/ScratchDir.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Strings = std::vector<std::string>;

// DiNNO's README template: its two blocks, joined (their "..." elisions left out).
std::string read_template() {
  std::ifstream in(fs::path(DTRAIN_EXPERIMENT_TEST_DATA) / "dinno_template.yaml");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
const std::string kTemplate = read_template();

// `text` with the first occurrence of `from` replaced by `to`.
std::string with(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

class DinnoExperimentTest : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_ / "experiments"); }

  ExperimentSpec load(const std::string& text) {
    std::ofstream(dir_ / "experiments" / "e.yaml") << text;
    return load_experiment(dir_ / "experiments" / "e.yaml");
  }

  // The error loading `text` gives ("" when none).
  std::string error(const std::string& text) {
    try {
      load(text);
    } catch (const config::ConfigError& e) {
      return e.what();
    }
    return "";
  }

  std::string data_root() const { return (dir_ / "data").string(); }

  dtrain::testing::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path();
};

TEST_F(DinnoExperimentTest, TheTemplateIsOneCadmmRunWithTheCommonSettings) {
  const auto spec = load(kTemplate);
  EXPECT_EQ(spec.name, "dist_cnn_cadmm_scaled_v_const");
  EXPECT_EQ(spec.out_dir, "./outputs/");
  EXPECT_TRUE(spec.base.empty());
  EXPECT_EQ(spec.source_text, kTemplate);
  EXPECT_EQ(spec.overrides, (Strings{"data.dataset=mnist", "data.root=" + data_root(),
                                     "data.partition=hetero", "data.classes_per_rank=0", "optim.loss=nll",
                                     "model.name=dinnocnn", "model.num_filters=3", "model.kernel_size=5",
                                     "model.linear_width=64", "parallel.strategy=decentralized",
                                     "parallel.graph.type=wheel", "parallel.graph.nodes=5", "train.seed=0"}));
  const auto runs = expand_runs(spec);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "vanilla_cadmm");
  Strings expected = spec.overrides;
  for (const auto& o :
       Strings{"train.epochs=1000000", "train.max_steps=30", "parallel.decentralized.algorithm=cadmm",
               "parallel.decentralized.rho_init=1.0", "parallel.decentralized.rho_scaling=1.0",
               "parallel.decentralized.primal_iterations=5", "optim.name=adam", "optim.lr=0.005",
               "optim.scheduler.name=constant", "parallel.decentralized.persistent_primal_optimizer=false",
               "train.eval_every_steps=20", "train.eval_every_epochs=0", "train.checkpoint_every_epochs=0",
               "train.eval_at_start=true", "data.batch_size=64", "data.eval_batch_size=128",
               "train.log_evals=true"}) {
    expected.push_back(o);
  }
  EXPECT_EQ(runs[0].overrides, expected);
  ASSERT_TRUE(spec.dinno_form);
  EXPECT_EQ(spec.dinno_form->nodes, 5);
  EXPECT_TRUE(spec.dinno_form->writeout);
  EXPECT_FALSE(spec.dinno_form->solo);
  EXPECT_FALSE(spec.dinno_form->use_cuda);
  ASSERT_EQ(spec.dinno_form->problems.size(), 1u);
  EXPECT_EQ(spec.dinno_form->problems[0].metrics, dinno_metric_names());
}

// The tail of a run's overrides after the experiment's common ones.
Strings own(const ExperimentSpec& spec, const RunSpec& run) {
  return Strings(run.overrides.begin() + static_cast<std::ptrdiff_t>(spec.overrides.size()),
                 run.overrides.end());
}

TEST_F(DinnoExperimentTest, ThePaperFileIsDinnoDsgtAndDsgdOnACycleOfTen) {
  const fs::path paper = fs::path(DTRAIN_EXPERIMENT_TEST_DATA) / "dist_mnist_PAPER.yaml";
  const auto spec = load_experiment(paper);
  EXPECT_EQ(spec.name, "dist_mnist_PAPER");
  EXPECT_EQ(spec.out_dir, "../results/");
  ASSERT_TRUE(spec.dinno_form);
  EXPECT_TRUE(spec.dinno_form->use_cuda);
  EXPECT_FALSE(spec.dinno_form->solo);  // train_solo: False, its other keys checked all the same
  EXPECT_EQ(spec.dinno_form->nodes, 10);
  const auto root = fs::absolute(paper.parent_path().parent_path() / "data").lexically_normal().string();
  EXPECT_NE(std::find(spec.overrides.begin(), spec.overrides.end(), "data.root=" + root),
            spec.overrides.end());
  EXPECT_NE(std::find(spec.overrides.begin(), spec.overrides.end(), "parallel.graph.type=cycle"),
            spec.overrides.end());
  const auto runs = expand_runs(spec);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].name, "dinno");
  const Strings tail{
      "train.eval_every_steps=20", "train.eval_every_epochs=0", "train.checkpoint_every_epochs=0",
      "train.eval_at_start=true",  "data.batch_size=64",        "data.eval_batch_size=128",
      "train.log_evals=true"};
  Strings dinno{"train.epochs=1000000",
                "train.max_steps=2000",
                "parallel.decentralized.algorithm=cadmm",
                "parallel.decentralized.rho_init=0.5",
                "parallel.decentralized.rho_scaling=1.0003",
                "parallel.decentralized.primal_iterations=2",
                "optim.name=adam",
                "optim.lr=0.005",
                "optim.scheduler.name=log",
                "optim.scheduler.final_lr=0.0005",
                "parallel.decentralized.persistent_primal_optimizer=false"};
  dinno.insert(dinno.end(), tail.begin(), tail.end());
  EXPECT_EQ(own(spec, runs[0]), dinno);
  EXPECT_EQ(runs[1].name, "dsgt");
  Strings dsgt{"train.epochs=1000000", "train.max_steps=2000", "parallel.decentralized.algorithm=dsgt",
               "optim.name=sgd",       "optim.lr=0.005",       "parallel.decentralized.init_grads=true"};
  dsgt.insert(dsgt.end(), tail.begin(), tail.end());
  EXPECT_EQ(own(spec, runs[1]), dsgt);
  EXPECT_EQ(runs[2].name, "dsgd");
  Strings dsgd{"train.epochs=1000000",    "train.max_steps=2000", "parallel.decentralized.algorithm=dsgd",
               "optim.name=sgd",          "optim.lr=0.005",       "optim.scheduler.name=inverse",
               "optim.scheduler.mu=0.001"};
  dsgd.insert(dsgd.end(), tail.begin(), tail.end());
  EXPECT_EQ(own(spec, runs[2]), dsgd);
}

TEST_F(DinnoExperimentTest, TrainSoloAddsTheSoloRunFirst) {
  const auto spec =
      load(with(kTemplate, "  model:\n",
                "  individual_training:\n    train_solo: True\n    optimizer: \"adam\"\n    lr: 0.005\n"
                "    epochs: 6\n    train_batch_size: 100\n    val_batch_size: 100\n    verbose: true\n"
                "  model:\n"));
  const auto runs = expand_runs(spec);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "solo");
  EXPECT_EQ(own(spec, runs[0]),
            (Strings{"parallel.decentralized.algorithm=individual", "optim.name=adam", "optim.lr=0.005",
                     "train.epochs=6", "data.batch_size=100", "data.eval_batch_size=100"}));
  EXPECT_TRUE(spec.dinno_form->solo);
  EXPECT_TRUE(spec.dinno_form->solo_verbose);
  // A problem may not take the solo run's folder.
  const auto clash = error(with(with(kTemplate, "  model:\n",
                                     "  individual_training:\n    train_solo: true\n"
                                     "    optimizer: sgd\n    lr: 0.1\n    epochs: 1\n"
                                     "    train_batch_size: 8\n    val_batch_size: 8\n"
                                     "  model:\n"),
                                "\"vanilla_cadmm\"", "solo"));
  EXPECT_NE(clash.find("problem_name solo"), std::string::npos) << clash;
}

TEST_F(DinnoExperimentTest, AnUnknownKeyNamesItsLineAndTheKeysAllowed) {
  // The README's own misspelling of kernel_size.
  const auto typo = error(with(kTemplate, "kernel_size: 5", "kernal_width: 5"));
  EXPECT_NE(typo.find("e.yaml:15: experiment.model.kernal_width: unknown key"), std::string::npos) << typo;
  EXPECT_NE(typo.find("num_filters, kernel_size, linear_width"), std::string::npos) << typo;
  const auto top = error(kTemplate + "extra: 1\n");
  EXPECT_NE(top.find("e.yaml:38: extra: unknown key; the file may hold experiment, problem_configs"),
            std::string::npos)
      << top;
  const auto alg =
      error(with(kTemplate, "      primal_lr: 0.005", "      primal_lr: 0.005\n      alpha: 0.1"));
  EXPECT_NE(alg.find("e.yaml:38: problem_configs.problem1.optimizer_config.alpha: unknown key"),
            std::string::npos)
      << alg;
  // A known key the others make pointless is refused rather than ignored.
  const auto unused =
      error(with(kTemplate, "      primal_lr: 0.005", "      primal_lr: 0.005\n      lr_decay_type: log"));
  EXPECT_NE(unused.find("e.yaml:38: problem_configs.problem1.optimizer_config.lr_decay_type: not used"),
            std::string::npos)
      << unused;
  const auto missing = error(with(kTemplate, "    num_nodes: 5\n", ""));
  EXPECT_NE(missing.find("experiment.graph.num_nodes: missing"), std::string::npos) << missing;
  const auto loss = error(with(kTemplate, "\"NLL\"", "\"MSE\""));
  EXPECT_NE(loss.find("e.yaml:7: experiment.loss: expected NLL"), std::string::npos) << loss;
  EXPECT_NE(loss.find("\"MSE\""), std::string::npos) << loss;
  const auto name = error(with(kTemplate, "\"dist_cnn_cadmm_scaled_v_const\"", "\"a/b\""));
  EXPECT_NE(name.find("e.yaml:2: experiment.name: expected a name"), std::string::npos) << name;
}

TEST_F(DinnoExperimentTest, AnUnknownAlgorithmListsTheKnownOnes) {
  const auto e = error(with(kTemplate, "alg_name: \"cadmm\"", "alg_name: \"prox-pda\""));
  EXPECT_NE(
      e.find("e.yaml:31: problem_configs.problem1.optimizer_config.alg_name: expected one of cadmm, dinno, "
             "dsgd, dsgt, choco, found \"prox-pda\""),
      std::string::npos)
      << e;
  const auto profile =
      error(with(kTemplate, "      primal_lr: 0.005", "      primal_lr: 0.005\n      profile: true"));
  EXPECT_NE(profile.find("e.yaml:38: problem_configs.problem1.optimizer_config.profile: dtrain writes no "
                         "torch.profiler trace; set profile: false"),
            std::string::npos)
      << profile;
}

TEST_F(DinnoExperimentTest, MetricsAreTheFiveTheAuthorsDefine) {
  const auto e = error(with(kTemplate, "\"current_epoch\"", "\"validation_as_vector\""));
  EXPECT_NE(
      e.find(
          "e.yaml:29: problem_configs.problem1.metrics: expected one of forward_pass_count, "
          "validation_loss, consensus_error, top1_accuracy, current_epoch, found \"validation_as_vector\""),
      std::string::npos)
      << e;
  const auto twice = error(with(kTemplate, "\"current_epoch\"", "\"top1_accuracy\""));
  EXPECT_NE(twice.find("e.yaml:29:"), std::string::npos) << twice;
  EXPECT_NE(twice.find("listed twice"), std::string::npos) << twice;
  const auto spec = load(with(kTemplate, "      - \"consensus_error\"\n", ""));
  EXPECT_EQ(spec.dinno_form->problems[0].metrics,
            (Strings{"forward_pass_count", "validation_loss", "top1_accuracy", "current_epoch"}));
}

TEST_F(DinnoExperimentTest, EvaluateFrequencyMayStandInEitherPlaceButOnce) {
  const auto later = load(
      with(kTemplate, "    evaluate_frequency: 20\n", "    metrics_config:\n      evaluate_frequency: 7\n"));
  const auto runs = expand_runs(later);
  EXPECT_NE(std::find(runs[0].overrides.begin(), runs[0].overrides.end(), "train.eval_every_steps=7"),
            runs[0].overrides.end());
  const auto both =
      error(with(kTemplate, "    evaluate_frequency: 20\n",
                 "    evaluate_frequency: 20\n    metrics_config:\n      evaluate_frequency: 7\n"));
  EXPECT_NE(both.find("e.yaml:22: problem_configs.problem1.evaluate_frequency: also given"),
            std::string::npos)
      << both;
  const auto none = error(with(kTemplate, "    evaluate_frequency: 20\n", ""));
  EXPECT_NE(none.find("problem_configs.problem1.evaluate_frequency: missing"), std::string::npos) << none;
}

TEST_F(DinnoExperimentTest, ChocoAndTheDsgdTemplateFormTranslate) {
  const std::string choco_opt =
      "      alg_name: choco\n      outer_iterations: 10\n      lr: 0.1\n      gamma: 0.5\n"
      "      compressor: topk\n      ratio: 0.1\n";
  auto start = kTemplate.find("      alg_name");
  const std::string head = kTemplate.substr(0, start);
  auto spec = load(head + choco_opt);
  EXPECT_EQ(own(spec, expand_runs(spec)[0]),
            (Strings{"train.epochs=1000000", "train.max_steps=10", "parallel.decentralized.algorithm=choco",
                     "optim.name=sgd", "optim.lr=0.1", "parallel.decentralized.consensus_step=0.5",
                     "parallel.decentralized.compressor=topk", "parallel.decentralized.compression_ratio=0.1",
                     "train.eval_every_steps=20", "train.eval_every_epochs=0",
                     "train.checkpoint_every_epochs=0", "train.eval_at_start=true", "data.batch_size=64",
                     "data.eval_batch_size=128", "train.log_evals=true"}));
  const auto no_ratio = error(head + with(choco_opt, "      ratio: 0.1\n", ""));
  EXPECT_NE(no_ratio.find("optimizer_config.ratio: missing"), std::string::npos) << no_ratio;
  const auto stray = error(head + with(choco_opt, "compressor: topk", "compressor: sign"));
  EXPECT_NE(stray.find("optimizer_config.ratio: applies to topk and randomk only"), std::string::npos)
      << stray;
  const auto qbit = error(head + with(choco_opt, "compressor: topk\n      ratio: 0.1", "compressor: qbit"));
  EXPECT_NE(qbit.find("optimizer_config.bits: missing"), std::string::npos) << qbit;
  spec = load(head + "      alg_name: dsgd\n      outer_iterations: 10\n      lr: 0.01\n");
  const auto dsgd = own(spec, expand_runs(spec)[0]);
  EXPECT_EQ(Strings(dsgd.begin() + 2, dsgd.begin() + 6),
            (Strings{"parallel.decentralized.algorithm=dsgd", "optim.name=sgd", "optim.lr=0.01",
                     "optim.scheduler.name=constant"}));
}

// A problem's run is written into <output_metadir>/<date>_<name>/<problem_name>/, and its
// config.yaml says so: `dtrain train` without a config file starts from the dAD paper's defaults
// (out_dir: logs, run_folder: named), which the experiment's out_dir override replaces.
TEST_F(DinnoExperimentTest, AProblemsRunRecordsTheExperimentFolderAsItsOutDir) {
  const auto spec = load(kTemplate);
  const auto run = expand_runs(spec)[0];
  const auto folder = fs::path(spec.out_dir) / "20250101-120000_dist_cnn_cadmm_scaled_v_const";
  const auto overrides = worker_overrides(run, folder);
  EXPECT_EQ(Strings(overrides.begin(), overrides.end() - 1), run.overrides);
  EXPECT_EQ(overrides.back(), "out_dir=" + folder.string());
  const auto cfg =
      config::parse_run_config("out_dir: logs\nrun_folder: named\n", "<the dAD paper's defaults>", overrides);
  EXPECT_EQ(cfg.out_dir, folder.string());
}

TEST_F(DinnoExperimentTest, NprocAndSetComeAfterEverythingTheFileSays) {
  auto spec = load(kTemplate);
  spec.final_overrides = {"train.seed=3", "nproc=5"};
  const auto runs = expand_runs(spec);
  const Strings last(runs[0].overrides.end() - 2, runs[0].overrides.end());
  EXPECT_EQ(last, (Strings{"train.seed=3", "nproc=5"}));
}

TEST_F(DinnoExperimentTest, VerboseEvalsFalseTurnsTheConsoleEvalLinesOff) {
  const auto spec = load(with(kTemplate, "verbose_evals: True", "verbose_evals: false"));
  EXPECT_EQ(expand_runs(spec)[0].overrides.back(), "train.log_evals=false");
}

}  // namespace
}  // namespace dtrain::experiment
