// The command line as a PyTorch user expects it, through the real binary: `dtrain train --help`
// lists every key the YAML reader accepts with its default, --print-config prints the effective
// configuration and makes nothing, a misspelt flag of any command gets "did you mean", and the
// exit statuses follow Note [Exit codes].
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/CliTestUtil.h"
#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::run;

class CommandLine : public ::testing::Test {
 protected:
  // A small valid configuration whose run folders would go under dir_/runs.
  fs::path write_config() const {
    const auto path = dir_ / "tiny.yaml";
    std::ofstream(path) << "name: tiny\nout_dir: " << (dir_ / "runs").string()
                        << "\ndata: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_size: 32}\n"
                           "model: {name: mlp, hidden: [16]}\nparallel: {strategy: local}\n";
    return path;
  }

  dtrain::testing::ScratchDir dir_;
};

// Every value of `node` by dotted key, as YAML writes it (flow style for sequences).
void flatten(const YAML::Node& node, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& entry : node) {
    const std::string key = prefix + entry.first.Scalar();
    if (entry.second.IsMap()) {
      flatten(entry.second, key + ".", out);
      continue;
    }
    YAML::Emitter text;
    text << YAML::Flow << entry.second;
    out.emplace(key, text.c_str());
  }
}

// The default of every key as config.yaml writes it: a strategy's own options appear under that
// strategy only, so each registered strategy is asked in turn; a model's own keys (model.hidden,
// model.albert.*) under the models that read them, so each registered model is too.
std::map<std::string, std::string> written_defaults() {
  std::map<std::string, std::string> defaults;
  flatten(dtrain::config::to_yaml_node(dtrain::config::RunConfig{}), "", defaults);
  for (const auto& name : dtrain::config::registered_choices(dtrain::config::kStrategyKey).names()) {
    const auto cfg = dtrain::config::parse_run_config("parallel: {strategy: " + name + "}\n");
    std::map<std::string, std::string> with_strategy;
    flatten(dtrain::config::to_yaml_node(cfg), "", with_strategy);
    for (const auto& [key, value] : with_strategy) {
      if (key != dtrain::config::kStrategyKey) defaults.emplace(key, value);
    }
  }
  for (const auto& name : dtrain::config::registered_choices(dtrain::config::kModelKey).names()) {
    std::map<std::string, std::string> with_model;
    flatten(dtrain::config::to_yaml_node(dtrain::config::parse_run_config("model: {name: " + name + "}\n")),
            "", with_model);
    for (const auto& [key, value] : with_model) {
      if (key.rfind("model.", 0) == 0 && key != dtrain::config::kModelKey) defaults.emplace(key, value);
    }
  }
  return defaults;
}

// The keys that hold a value: every key the reader accepts but the sections.
std::vector<std::string> option_keys() {
  const auto all = dtrain::config::config_keys();
  std::vector<std::string> options;
  for (const auto& key : all) {
    const bool section = std::any_of(
        all.begin(), all.end(), [&](const std::string& other) { return other.rfind(key + ".", 0) == 0; });
    if (!section) options.push_back(key);
  }
  return options;
}

TEST_F(CommandLine, TrainHelpListsEveryKeyTheReaderAcceptsWithItsDefault) {
  const auto help = run("train --help", dir_.path());
  ASSERT_EQ(help.exit_code, 0) << help.err;
  const auto defaults = written_defaults();
  const auto keys = option_keys();
  EXPECT_GT(keys.size(), 90u);
  for (const auto& key : {"train.max_steps", "data.subset_size", "train.log_every_steps",
                          "optim.scheduler.warmup_steps", "parallel.data_parallel.bucket_mb"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
  for (const auto& key : keys) {
    ASSERT_TRUE(defaults.count(key)) << key << " is in no written configuration";
    const std::string line = "\n  " + key + "=" + defaults.at(key);
    const auto at = help.out.find(line);
    ASSERT_NE(at, std::string::npos) << "--help lacks " << line.substr(3) << "\n" << help.out;
    // The keys of RunConfig.h each have a line of help, beside the key or on the next line.
    if (key.rfind("parallel.", 0) == 0 && std::count(key.begin(), key.end(), '.') > 1) continue;
    const auto end = help.out.find('\n', at + line.size());
    const bool beside = help.out.find_first_not_of(' ', at + line.size()) < end;
    const bool below = help.out.compare(end + 1, 44, std::string(44, ' ')) == 0;
    EXPECT_TRUE(beside || below) << key << " has no help";
  }
}

TEST_F(CommandLine, PrintConfigPrintsTheEffectiveConfigurationAndMakesNothing) {
  const auto config = write_config();
  const auto out = run(
      "train " + config.string() + " optim.lr=0.5 train.max_steps=3 --epochs 2 --print-config", dir_.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.err, "");
  const auto expected = dtrain::config::load_run_config(
      config.string(), {"optim.lr=0.5", "train.max_steps=3", "train.epochs=2"});
  EXPECT_EQ(out.out, dtrain::config::to_yaml(expected));
  const auto printed = dtrain::config::parse_run_config(out.out, "--print-config");
  EXPECT_EQ(printed, expected);
  EXPECT_EQ(printed.optim.lr, 0.5);
  EXPECT_EQ(printed.train.max_steps, 3);
  EXPECT_EQ(printed.train.epochs, 2);
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "--print-config made a run folder";
  // A bad override is refused as when training.
  const auto bad = run("train " + config.string() + " optim.lr=fast --print-config", dir_.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.out, "");
}

// `dtrain ARGS` fails with status 2 and one line holding `expected`.
void expect_usage_error(const dtrain::testing::Output& out, const std::string& expected) {
  EXPECT_EQ(out.exit_code, 2) << out.err;
  EXPECT_EQ(std::count(out.err.begin(), out.err.end(), '\n'), 1) << out.err;
  EXPECT_EQ(out.err.rfind("dtrain: error: ", 0), 0u) << out.err;
  EXPECT_NE(out.err.find(expected), std::string::npos) << out.err;
}

TEST_F(CommandLine, AMisspeltFlagOfEveryCommandGetsDidYouMean) {
  const auto config = write_config().string();
  const std::string dir = dir_.string();
  const std::vector<std::pair<std::string, std::string>> cases{
      {"train " + config + " --nprocs 2",
       "unknown option --nprocs; did you mean --nproc? (dtrain train --help"},
      {"train " + config + " --print-confg", "did you mean --print-config?"},
      {"launch --nproc-per-nodes 2 -- /bin/true",
       "unknown option --nproc-per-nodes; did you mean --nproc-per-node?"},
      {"experiment " + config + " --fresch", "unknown option --fresch; did you mean --fresh?"},
      {"bench comm --iter 5", "unknown option --iter; did you mean --iters? (dtrain bench comm --help"},
      {"bench data --image-sise 8", "did you mean --image-size?"},
      {"bench throughput --model mlp", "did you mean --models?"},
      {"report " + dir + " --hepl", "did you mean --help? (dtrain report --help"},
      {"info --jsn", "unknown option --jsn; did you mean --json? (dtrain info --help"},
      {"cam " + dir + " --test-indx 0", "did you mean --test-index?"},
      {"train " + config + " --no-such-flag", "unknown option --no-such-flag (dtrain train --help"},
      {"trian " + config, "unknown command 'trian'; the commands are"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE("dtrain " + args);
    expect_usage_error(run(args, dir_.path()), expected);
  }
  EXPECT_NE(run("trian", dir_.path()).err.find("did you mean train?"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

TEST_F(CommandLine, UsageErrorsExitTwoAndHelpZero) {
  const auto config = write_config().string();
  expect_usage_error(run("train " + config + " --nproc 0", dir_.path()),
                     "--nproc: must be at least 1, found 0");
  expect_usage_error(run("train " + config + " --nproc two", dir_.path()),
                     "--nproc: expected a whole number");
  expect_usage_error(run("train " + config + " train.max_step=1", dir_.path()),
                     "unknown key train.max_step; did you mean train.max_steps?");
  expect_usage_error(run("train " + config + " optim.lr=-1", dir_.path()),
                     "optim.lr: expected a positive number");
  expect_usage_error(run("train " + (dir_ / "missing.yaml").string(), dir_.path()), "missing.yaml");
  expect_usage_error(run("bench", dir_.path()), "");
  expect_usage_error(run("", dir_.path()), "");
  for (const auto* command :
       {"--help", "train --help", "launch --help", "bench comm --help", "info --help"}) {
    EXPECT_EQ(run(command, dir_.path()).exit_code, 0) << command;
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

}  // namespace
