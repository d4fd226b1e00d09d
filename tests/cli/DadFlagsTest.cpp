// The dAD paper's flags on `dtrain train`, parsed as the command parses them: each reaches its key through
// the override path, names match without regard to case, and errors name the flag.
#include "dtrain/cli/DadFlags.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "support/ScratchDir.h"

namespace dtrain::cli {
namespace {

// The flags as a command line gives them, through CLI11, on top of `dtrain train`'s no-CONFIG
// defaults (or `file`), then `overrides`.
config::RunConfig config_of(std::vector<std::string> args, const std::vector<std::string>& overrides = {},
                            const std::string& file = "") {
  CLI::App app;
  DadFlags flags;
  flags.add_to(app);
  args.insert(args.begin(), "dtrain");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
  auto all = flags.overrides();
  const auto given = config::parse_overrides(overrides);
  check_no_conflict(all, given);
  all.insert(all.end(), given.begin(), given.end());
  if (!file.empty()) return config::run_config_from_file(file, all);
  return config::run_config_from_text(kDadDefaults, kDadDefaultsSource, all);
}

std::string error_of(const std::vector<std::string>& args, const std::vector<std::string>& overrides = {}) {
  try {
    config_of(args, overrides);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(DadFlags, WithoutFlagsTheRunFolderIsLogsSlashName) {
  const auto c = config_of({});
  EXPECT_EQ(c.out_dir, "logs");
  EXPECT_EQ(c.run_folder, config::RunFolder::Named);
  config::RunConfig defaults;
  defaults.out_dir = "logs";
  defaults.run_folder = config::RunFolder::Named;
  EXPECT_TRUE(c == defaults);  // everything else is RunConfig's default
}

TEST(DadFlags, EveryFlagReachesItsKey) {
  const auto c = config_of({"--backend",
                            "gloo",
                            "--lr",
                            "0.25",
                            "--batch-size",
                            "48",
                            "--epochs",
                            "3",
                            "--name",
                            "rankdad_mnist",
                            "--log-dir",
                            "out/logs",
                            "--distributed-mode",
                            "dsgd",
                            "--num-folds",
                            "4",
                            "--k",
                            "3",
                            "--N",
                            "1000",
                            "--model",
                            "mlp",
                            "--model-kwargs",
                            "{'hidden': [1024, 512], 'activation': 'tanh', 'dropout': 0.25}",
                            "--dataset",
                            "FashionMNIST",
                            "--criterion",
                            "CrossEntropyLoss",
                            "--optimizer",
                            "Adam",
                            "--scheduler",
                            "Cosine",
                            "--model-args",
                            "[]"});
  EXPECT_EQ(c.parallel.backend, config::Backend::Gloo);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.25);
  EXPECT_EQ(c.data.batch_size, 48);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.name, "rankdad_mnist");
  EXPECT_EQ(c.out_dir, "out/logs");
  EXPECT_EQ(c.run_folder, config::RunFolder::Named);
  EXPECT_EQ(c.parallel.strategy, "data_parallel");
  EXPECT_EQ(c.data.partition, "kfold");
  EXPECT_EQ(c.data.num_folds, 4);
  EXPECT_EQ(c.data.fold, 3);
  EXPECT_EQ(c.data.subset_size, 1000);
  EXPECT_EQ(c.model.name, "mlp");
  EXPECT_EQ(c.model.hidden, (std::vector<int>{1024, 512}));
  EXPECT_EQ(c.model.activation, config::Activation::Tanh);
  EXPECT_DOUBLE_EQ(c.model.dropout, 0.25);
  EXPECT_EQ(c.data.dataset, "fashion-mnist");
  EXPECT_EQ(c.optim.loss, "cross_entropy");
  EXPECT_EQ(c.optim.name, "adam");
  EXPECT_EQ(c.optim.scheduler.name, "cosine");
}

TEST(DadFlags, ThePapersNamesMatchWithoutRegardToCase) {
  const auto c = config_of({"--model", "MNISTNet", "--dataset", "MNIST", "--distributed-mode", "DSGD"});
  EXPECT_EQ(c.model.name, "mnistnet");
  EXPECT_EQ(c.data.dataset, "mnist");
  EXPECT_EQ(c.parallel.strategy, "data_parallel");
  EXPECT_EQ(config_of({"--dataset", "DogsVsCats", "--model", "ViT"}).data.dataset, "dogsvscats");
  EXPECT_EQ(config_of({"--model", "VIT"}).model.name, "vit");
  // The seed's other modes, once their strategies are registered.
  for (const char* mode : {"dad", "rankdad", "RankDAD"}) {
    const auto canonical = config::registered_choices(config::kStrategyKey).resolve(mode);
    if (canonical) {
      EXPECT_EQ(config_of({"--distributed-mode", mode}).parallel.strategy, *canonical);
    }
  }
}

TEST(DadFlags, NIsTheTrainingSetSizeWithMinusOneForAll) {
  EXPECT_EQ(config_of({"--N", "-1"}).data.subset_size, 0);
  EXPECT_EQ(config_of({"--N", "256"}).data.subset_size, 256);
  for (const char* bad : {"0", "-2", "ten", "12x"}) {
    EXPECT_EQ(error_of({"--N", bad}),
              std::string("--N ") + bad +
                  ": expected a positive number of training samples, or -1 for all of them");
  }
}

TEST(DadFlags, ErrorsNameTheFlagAndTheKey) {
  EXPECT_EQ(error_of({"--lr", "fast"}), "--lr fast: optim.lr: expected a positive number, found \"fast\"");
  EXPECT_EQ(error_of({"--epochs", "0"}),
            "--epochs 0: train.epochs: expected a positive integer, found \"0\"");
  EXPECT_EQ(error_of({"--num-folds", "5", "--k", "5"}),
            "--k 5: data.fold: expected an integer in [0, 4], found \"5\"");
  EXPECT_EQ(error_of({"--backend", "tcp"}),
            "--backend tcp: parallel.backend: expected one of auto, gloo, mpi, nccl; found \"tcp\"");
  EXPECT_EQ(error_of({"--name", "a/b"}),
            "--name a/b: name: expected a name without '/' or control characters, not . or .. (it names the "
            "run folder), found "
            "\"a/b\"");
}

TEST(DadFlags, UnknownModeOrModelListsTheRegisteredNames) {
  const auto mode = error_of({"--distributed-mode", "warp"});
  EXPECT_EQ(mode.rfind("--distributed-mode warp: parallel.strategy: expected one of " +
                           config::registered_choices(config::kStrategyKey).list() + "; found \"warp\"",
                       0),
            0u)
      << mode;
  const auto model = error_of({"--model", "resnet1000"});
  EXPECT_EQ(model.rfind("--model resnet1000: model.name: expected one of " +
                            config::registered_choices(config::kModelKey).list() + "; found \"resnet1000\"",
                        0),
            0u)
      << model;
  EXPECT_EQ(mode.find('\n'), std::string::npos);
}

TEST(DadFlags, ModelKwargsArePythonDictsOfModelOptions) {
  EXPECT_EQ(config_of({"--model", "vit", "--model-kwargs", "{\"patch\": 7, 'heads': 2}"}).model.patch, 7);
  // A key the model does not read is refused as in a configuration file.
  const auto unread = error_of({"--model-kwargs", "{'patch': 7}"});
  EXPECT_NE(unread.find("model.patch: model " + config::ModelConfig{}.name + " does not read it (vit does)"),
            std::string::npos)
      << unread;
  EXPECT_EQ(config_of({"--model-kwargs", "{}"}).model.hidden, config::ModelConfig{}.hidden);
  const auto typo = error_of({"--model-kwargs", "{'hiden': [8]}"});
  EXPECT_EQ(typo, "--model-kwargs {'hiden': [8]}: unknown key model.hiden; did you mean model.hidden?");
  EXPECT_EQ(error_of({"--model-kwargs", "{'depth': 'deep'}"}),
            "--model-kwargs {'depth': 'deep'}: model.depth: expected a positive integer, found \"deep\"");
  EXPECT_EQ(error_of({"--model-kwargs", "[1024]"}),
            "--model-kwargs [1024]: expected a Python dict of model options, e.g. \"{'hidden': [1024]}\"");
  const auto name = error_of({"--model-kwargs", "{'name': 'vit'}"});
  EXPECT_NE(name.find("'name' is not a model option"), std::string::npos) << name;
  EXPECT_NE(name.find("--model"), std::string::npos) << name;
}

TEST(DadFlags, PositionalModelArgsCannotBeHonoured) {
  EXPECT_EQ(config_of({"--model-args", "()"}).model.name, config::ModelConfig{}.name);
  const auto e = error_of({"--model-args", "[784, 10]"});
  EXPECT_EQ(
      e.rfind("--model-args [784, 10]: dtrain's models take named options, not positional arguments", 0), 0u)
      << e;
  EXPECT_NE(e.find("--model-kwargs \"{'hidden': [1024]}\""), std::string::npos) << e;
  EXPECT_NE(e.find("hidden, activation"), std::string::npos) << e;
}

TEST(DadFlags, AFlagAndAnOverrideOfTheSameKeyAreAnError) {
  EXPECT_EQ(error_of({"--lr", "0.1"}, {"optim.lr=0.2"}),
            "--lr 0.1 sets optim.lr, and so does override \"optim.lr=0.2\"; give one of them");
  EXPECT_NE(error_of({"--model-kwargs", "{'hidden': [4]}"}, {"model={name: mlp}"}).find("sets model.hidden"),
            std::string::npos);
  // Different keys combine.
  const auto c = config_of({"--lr", "0.1", "--dataset", "mnist"}, {"data.root=/x", "optim.momentum=0.9"});
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.1);
  EXPECT_EQ(c.data.root, "/x");
  EXPECT_DOUBLE_EQ(c.optim.momentum, 0.9);
}

TEST(DadFlags, WithAConfigFileFlagsOverrideIt) {
  const dtrain::testing::ScratchDir dir;
  const auto path = dir / "seed-flags.yaml";
  std::ofstream(path) << "name: from_file\nout_dir: runs\noptim: {lr: 0.5}\nmodel: {name: lenet5}\n";
  const auto c = config_of({"--lr", "0.125", "--name", "from_flag"}, {}, path.string());
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.125);
  EXPECT_EQ(c.name, "from_flag");
  EXPECT_EQ(c.model.name, "lenet5");
  EXPECT_EQ(c.run_folder,
            config::RunFolder::Dated);  // the file's layout, until --log-dir asks for the seed's
  EXPECT_EQ(config_of({"--log-dir", "l"}, {}, path.string()).run_folder, config::RunFolder::Named);
}

}  // namespace
}  // namespace dtrain::cli
