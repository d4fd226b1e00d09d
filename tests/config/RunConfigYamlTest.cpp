// Loading, validating, overriding and round-tripping RunConfig YAML, including the exact place
// (file:line or override) and key that every kind of error names.
#include "dtrain/config/RunConfigYaml.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"
#include "dtrain/config/YamlFile.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategy.h"
#include "support/ScratchDir.h"

namespace dtrain::config {
namespace {

const std::string kExample = std::string(DTRAIN_CONFIG_TEST_DIR) + "/example.yaml";

// Runs `parse` and returns the ConfigError it throws; fails the test when it does not throw.
ConfigError error_of(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const ConfigError& e) {
    return e;
  }
  ADD_FAILURE() << "expected a ConfigError";
  return ConfigError("", "", "");
}

ConfigError error_of_text(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { parse_run_config(yaml, "x.yaml", overrides); });
}

TEST(RunConfigYaml, LoadsTheExampleFile) {
  const RunConfig c = load_run_config(kExample);
  EXPECT_EQ(c.name, "lenet-fashion");
  EXPECT_EQ(c.nproc, 2);
  EXPECT_EQ(c.data.partition, "dirichlet");
  EXPECT_DOUBLE_EQ(c.data.dirichlet_alpha, 0.3);
  EXPECT_EQ(c.data.batch_size, 128);
  EXPECT_EQ(c.model.name, "lenet5");
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 5e-4);
  EXPECT_EQ(c.optim.scheduler.name, "step");
  EXPECT_EQ(c.optim.scheduler.step_size, 10);
  EXPECT_DOUBLE_EQ(c.parallel.options.get<parallel::DataParallelStrategyOptions>("data_parallel").bucket_mb,
                   4.0);
  EXPECT_EQ(c.train.seed, 42u);
  // Keys left out keep RunConfig.h's defaults.
  EXPECT_EQ(c.data.eval_batch_size, RunConfig{}.data.eval_batch_size);
  EXPECT_EQ(c.model.hidden, RunConfig{}.model.hidden);
}

TEST(RunConfigYaml, EmptyDocumentGivesDefaults) {
  EXPECT_TRUE(parse_run_config("") == RunConfig{});
  EXPECT_TRUE(parse_run_config("data:\n") == RunConfig{});
}

TEST(RunConfigYaml, RoundTripIsIdentical) {
  RunConfig c = load_run_config(kExample);
  // Values that stress the writer: doubles without a short decimal form, empty strings and lists,
  // large integers, strings that look like other types.
  c.optim.lr = 0.1 + 0.2;
  c.optim.eps = 1e-12;
  c.model.name = "vit";
  c.model.mlp_ratio = 3.0;
  c.data.root = "";
  c.data.text_path = "a path/with: colon";
  c.data.synthetic_shape = {3, 32, 32};
  c.train.seed = 1234567890123ull;
  c.parallel.options.get<parallel::DataParallelStrategyOptions>("data_parallel").compression =
      parallel::GradCompression::Bf16;
  c.parallel.poll_wait_us = 0;
  c.name = "true";
  const std::string yaml = to_yaml(c);
  const RunConfig back = parse_run_config(yaml, "roundtrip.yaml");
  EXPECT_TRUE(back == c) << yaml;
  EXPECT_EQ(to_yaml(back), yaml);
  EXPECT_DOUBLE_EQ(back.optim.lr, 0.1 + 0.2);
  EXPECT_EQ(back.name, "true");
  // Changing any field is seen by the comparison.
  RunConfig other = back;
  other.train.threads = 3;
  EXPECT_FALSE(other == back);
}

TEST(RunConfigYaml, JsonHasEverySection) {
  const auto json = to_json(load_run_config(kExample));
  EXPECT_EQ(json.at("optim").at("scheduler").at("name"), "step");
  EXPECT_EQ(json.at("data").at("synthetic_shape"), nlohmann::json({1, 28, 28}));
  EXPECT_DOUBLE_EQ(json.at("optim").at("lr").get<double>(), 0.05);
}

// model.size and model.albert.* are typed and refused by name; the albert section belongs to albert.
TEST(RunConfigYaml, AlbertSettings) {
  const auto config =
      parse_run_config("model:\n  name: albert\n  size: large\n  albert:\n    num_layers: 4\n", "x.yaml",
                       {"model.albert.hidden_size=256"});
  EXPECT_EQ(config.model.size, ModelSize::Large);
  EXPECT_EQ(config.model.albert.num_layers, 4);
  EXPECT_EQ(config.model.albert.hidden_size, 256);
  EXPECT_EQ(config.model.albert.embedding_size, 0);  // the size's
  EXPECT_EQ(parse_run_config(to_yaml(config)), config);
  EXPECT_EQ(error_of_text("model:\n  name: albert\n  size: huge\n").key(), "model.size");
  EXPECT_EQ(error_of_text("model:\n  name: albert\n  albert:\n    num_layer: 4\n").key(),
            "model.albert.num_layer");
  const auto elsewhere = error_of_text("model:\n  name: vit\n  albert:\n    num_layers: 4\n");
  EXPECT_NE(std::string(elsewhere.what()).find("model.name is vit"), std::string::npos) << elsewhere.what();
  EXPECT_EQ(to_yaml(parse_run_config("model:\n  name: vit\n")).find("albert:"), std::string::npos);
}

// A key of model.* the chosen model does not read is refused by name, from a file or an override,
// never trained as if it applied; one it reads is kept, and config.yaml writes only those.
TEST(RunConfigYaml, AModelKeyTheModelDoesNotReadIsRefused) {
  const auto from_file = error_of_text("model:\n  name: lenet5\n  hidden: [64]\n");
  EXPECT_EQ(from_file.key(), "model.hidden");
  EXPECT_NE(std::string(from_file.what()).find("model lenet5 does not read it (mlp does)"), std::string::npos)
      << from_file.what();
  try {
    parse_run_config("model: {name: mlp}\n", "x.yaml", {"model.name=vit", "model.stem=imagenet"});
    FAIL() << "model.stem was accepted with vit";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.stem");
    EXPECT_NE(std::string(e.what()).find("model.stem=imagenet"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("resnet18 and resnet50 do"), std::string::npos) << e.what();
  }
  EXPECT_EQ(error_of_text("model: {name: mlp, patch: 8}\n").key(), "model.patch");
  EXPECT_EQ(error_of_text("model: {name: vit, tie_embeddings: false}\n").key(), "model.tie_embeddings");
  // What each reads, kept and written back.
  const auto vit = parse_run_config("model: {name: vit, patch: 7, dim: 32, dropout: 0.1}\n");
  EXPECT_EQ(vit.model.patch, 7);
  EXPECT_EQ(parse_run_config(to_yaml(vit)), vit);
  const auto written = to_yaml(vit);
  EXPECT_NE(written.find("patch: 7"), std::string::npos) << written;
  EXPECT_EQ(written.find("hidden:"), std::string::npos) << written;
  EXPECT_EQ(to_json(vit).at("model").count("hidden"), 0u);
  // Made in code: refused as reading it would be, unless the key holds its default.
  RunConfig code;
  code.model.name = "lenet5";
  EXPECT_NO_THROW(check_model_keys_read(code, "code"));
  code.model.hidden = {64};
  try {
    check_model_keys_read(code, "code");
    ADD_FAILURE() << "model.hidden was accepted with lenet5";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "model.hidden");
  }
  code.model.name = "mlp";
  EXPECT_NO_THROW(check_model_keys_read(code, "code"));
  const auto mlp = parse_run_config("model: {name: mlp, hidden: [8], activation: tanh}\n");
  EXPECT_EQ(mlp.model.hidden, std::vector<int>{8});
  EXPECT_NE(to_yaml(mlp).find("hidden:"), std::string::npos);
  EXPECT_EQ(parse_run_config(to_yaml(mlp)), mlp);
}

// An experiment's runs of several models under shared model keys: each run takes the keys its
// model reads, and says which it was left without.
TEST(RunConfigYaml, AGridRunLeavesOutTheModelKeysItsModelDoesNotRead) {
  GridModelKeys keys;
  const auto lenet = parse_grid_run_config("model: {name: mlp, hidden: [8]}\n", "x.yaml",
                                           {"model.name=lenet5", "model.dropout=0.25"}, keys);
  EXPECT_EQ(lenet.model.name, "lenet5");
  EXPECT_EQ(lenet.model.hidden, RunConfig{}.model.hidden);
  EXPECT_DOUBLE_EQ(lenet.model.dropout, 0.25);
  EXPECT_EQ(keys.left_out, std::vector<std::string>{"model.hidden"});
  EXPECT_EQ(keys.kept, std::vector<std::string>{"model.dropout"});
}

TEST(RunConfigYaml, OverridesApplyAndValidate) {
  const RunConfig c =
      load_run_config(kExample, {"optim.lr=0.01", "parallel.strategy=local", "parallel.data_parallel=null",
                                 "data.synthetic_shape=[3,32,32]", "optim.scheduler.name=cosine",
                                 "train.epochs=7", "name=other", "model.name=mlp", "model.hidden=[64]"});
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.01);
  EXPECT_EQ(c.parallel.strategy, "local");
  EXPECT_EQ(c.data.synthetic_shape, (std::vector<std::int64_t>{3, 32, 32}));
  EXPECT_EQ(c.optim.scheduler.name, "cosine");
  EXPECT_EQ(c.optim.scheduler.step_size, 10);  // the rest of the file's section is kept
  EXPECT_EQ(c.train.epochs, 7);
  EXPECT_EQ(c.name, "other");
  EXPECT_EQ(c.model.hidden, std::vector<int>{64});
  // The later of two overrides wins; a section absent from the file is created.
  const RunConfig d = parse_run_config("name: a\n", "x.yaml", {"train.epochs=2", "train.epochs=5"});
  EXPECT_EQ(d.train.epochs, 5);
}

// key=null (or ~, Null) and ~key take a key out of the document, so its default applies again;
// a key the schema does not have is refused rather than silently "removed".
TEST(RunConfigYaml, NullOrTildeOverridesRemoveAKey) {
  const std::string yaml = "optim: {name: sgd, momentum: 0.9, nesterov: true}\nparallel: {strategy: local}\n";
  EXPECT_EQ(parse_run_config(yaml, "x.yaml").optim.momentum, 0.9);
  for (const auto& removal :
       {std::vector<std::string>{"optim.name=adam", "optim.momentum=null", "optim.nesterov=~"},
        std::vector<std::string>{"optim.name=adam", "~optim.momentum", "~ optim.nesterov"}}) {
    const auto config = parse_run_config(yaml, "x.yaml", removal);
    EXPECT_EQ(config.optim.name, "adam");
    EXPECT_EQ(config.optim.momentum, 0.0);
    EXPECT_FALSE(config.optim.nesterov);
  }
  // A whole section, and a key below a section the file does not have (nothing to remove).
  EXPECT_EQ(parse_run_config(yaml, "x.yaml", {"optim=null"}).optim.momentum, 0.0);
  EXPECT_EQ(parse_run_config(yaml, "x.yaml", {"~parallel.zero.stage"}).parallel.strategy, "local");
  const auto unknown = error_of_text(yaml, {"optim.momentun=null"});
  EXPECT_EQ(
      std::string(unknown.what()),
      "override \"optim.momentun=null\": optim.momentun: no such key to remove; `dtrain train --help` lists "
      "the keys");
  // An empty value is not a removal: the reader says what it expected.
  EXPECT_NE(std::string(error_of_text(yaml, {"optim.momentum="}).what()).find("optim.momentum: expected"),
            std::string::npos);
}

TEST(RunConfigYaml, ApplyOverridesOnANode) {
  YAML::Node root = YAML::Load("optim:\n  lr: 0.1\n");
  apply_overrides(root, parse_overrides({"optim.scheduler.gamma=0.5", "data.dataset=mnist"}));
  EXPECT_DOUBLE_EQ(root["optim"]["scheduler"]["gamma"].as<double>(), 0.5);
  EXPECT_DOUBLE_EQ(root["optim"]["lr"].as<double>(), 0.1);
  EXPECT_EQ(root["data"]["dataset"].as<std::string>(), "mnist");
}

TEST(RunConfigYaml, TransferOptionsReadAndRoundTrip) {
  const auto c = parse_run_config(
      "model:\n  init_from: runs/a/model.pt\n  init_strict: false\n  freeze: [\"layers.0.*\", layers.3.*]\n",
      "x.yaml");
  EXPECT_EQ(c.model.init_from, "runs/a/model.pt");
  EXPECT_FALSE(c.model.init_strict);
  EXPECT_EQ(c.model.freeze, (std::vector<std::string>{"layers.0.*", "layers.3.*"}));
  const RunConfig back = parse_run_config(to_yaml(c), "roundtrip.yaml");
  EXPECT_TRUE(back == c);
  RunConfig other = back;
  other.model.freeze.pop_back();
  EXPECT_FALSE(other == back);
  EXPECT_EQ(to_json(c)["model"]["freeze"], nlohmann::json({"layers.0.*", "layers.3.*"}));
  EXPECT_EQ(parse_run_config("", "x.yaml", {"model.freeze=[layers.1.*]"}).model.freeze,
            std::vector<std::string>{"layers.1.*"});
  EXPECT_STREQ(
      error_of_text("model:\n  freeze: layers.0.*\n").what(),
      "x.yaml:2: model.freeze: expected a sequence of non-empty strings, e.g. [\"layers.0.*\"]; found "
      "\"layers.0.*\"");
}

TEST(RunConfigErrors, WrongTypeNamesFileLineAndKey) {
  const std::string yaml =
      "name: run\n"
      "optim:\n"
      "  name: sgd\n"
      "  lr: fast\n";
  const auto e = error_of_text(yaml);
  EXPECT_EQ(e.where(), "x.yaml:4");
  EXPECT_EQ(e.key(), "optim.lr");
  EXPECT_STREQ(e.what(), "x.yaml:4: optim.lr: expected a positive number, found \"fast\"");
}

TEST(RunConfigErrors, QuotedNumbersAndBooleansAreStrings) {
  // '64' is a string in YAML: a number or a boolean must be written plain.
  EXPECT_STREQ(error_of_text("data:\n  batch_size: '64'\n").what(),
               "x.yaml:2: data.batch_size: expected a positive integer, found the quoted string \"64\"");
  EXPECT_STREQ(error_of_text("optim:\n  lr: \"0.1\"\n").what(),
               "x.yaml:2: optim.lr: expected a positive number, found the quoted string \"0.1\"");
  EXPECT_EQ(error_of_text("data:\n  normalize: 'true'\n").key(), "data.normalize");
  EXPECT_EQ(error_of_text("data:\n  synthetic_shape: [1, '8', 8]\n").key(), "data.synthetic_shape");
  // Overrides on the command line are plain scalars.
  EXPECT_EQ(parse_run_config("name: a\n", "x.yaml", {"data.batch_size=64"}).data.batch_size, 64);
}

TEST(RunConfigErrors, UnknownKeySuggestsTheNearestKey) {
  const auto e = error_of_text("data:\n  dataset: mnist\n  batchsize: 3\n");
  EXPECT_STREQ(e.what(), "x.yaml:3: unknown key data.batchsize; did you mean data.batch_size?");
  EXPECT_EQ(e.key(), "data.batchsize");
  // The right key in the wrong section.
  const auto wrong_section = error_of_text("data:\n  lr: 0.1\n");
  EXPECT_STREQ(wrong_section.what(), "x.yaml:2: unknown key data.lr; did you mean optim.lr?");
  // Nothing close: the allowed keys are listed.
  const auto far = error_of_text("parallel:\n  zzzzzz: 1\n");
  EXPECT_NE(std::string(far.what()).find("allowed keys in parallel: "), std::string::npos) << far.what();
  EXPECT_NE(std::string(far.what()).find("accumulation_steps"), std::string::npos);
  // A strategy's own key at the top of parallel: the section it belongs in.
  EXPECT_STREQ(error_of_text("parallel:\n  bucket_mb: 4\n").what(),
               "x.yaml:2: unknown key parallel.bucket_mb; did you mean parallel.data_parallel.bucket_mb?");
  const auto top = error_of_text("name: a\nepochs: 3\n");
  EXPECT_STREQ(top.what(), "x.yaml:2: unknown key epochs; did you mean train.epochs?");
}

TEST(RunConfigErrors, OutOfRangeValues) {
  EXPECT_STREQ(error_of_text("data:\n  batch_size: 0\n").what(),
               "x.yaml:2: data.batch_size: expected a positive integer, found \"0\"");
  EXPECT_STREQ(error_of_text("model:\n  dropout: 1.0\n").what(),
               "x.yaml:2: model.dropout: expected a number in [0, 1), found \"1.0\"");
  EXPECT_STREQ(error_of_text("nproc: 3000000000\n").what(),
               "x.yaml:1: nproc: expected an integer in [1, 2147483647], found \"3000000000\"");
  EXPECT_STREQ(error_of_text("data:\n  num_folds: 4\n  fold: 4\n").what(),
               "x.yaml:3: data.fold: expected an integer in [0, 3], found \"4\"");
  EXPECT_STREQ(error_of_text("data:\n  synthetic_shape: [3, 0]\n").what(),
               "x.yaml:2: data.synthetic_shape: expected a sequence of one or more integers >= 1, e.g. [3, "
               "32, 32]; found \"0\" in the sequence");
  EXPECT_STREQ(error_of_text("train:\n  seed: -1\n").what(),
               "x.yaml:2: train.seed: expected an integer >= 0, found \"-1\"");
  EXPECT_STREQ(error_of_text("parallel:\n  poll_wait_us: -5\n").what(),
               "x.yaml:2: parallel.poll_wait_us: expected an integer >= 0, found \"-5\"");
  EXPECT_STREQ(error_of_text("parallel:\n  gloo_threads: 0\n").what(),
               "x.yaml:2: parallel.gloo_threads: expected a positive integer, found \"0\"");
}

TEST(RunConfigErrors, BadEnumListsTheAllowedValues) {
  // The lists are the registered ones, written beside their factories.
  EXPECT_STREQ(error_of_text("optim:\n  name: sgdd\n").what(),
               ("x.yaml:2: optim.name: expected one of " + registered_choices(kOptimizerKey).list() +
                "; found \"sgdd\"; did you mean sgd?")
                   .c_str());
  EXPECT_STREQ(error_of_text("parallel:\n  backend: tcp\n").what(),
               "x.yaml:2: parallel.backend: expected one of auto, gloo, mpi, nccl; found \"tcp\"");
  EXPECT_STREQ(error_of_text("parallel:\n  data_parallel:\n    compression: int8\n").what(),
               "x.yaml:3: parallel.data_parallel.compression: expected one of none, fp16, bf16, powersgd; "
               "found \"int8\"");
  const auto e = error_of_text("optim:\n  scheduler:\n    name: exp\n");
  EXPECT_EQ(e.key(), "optim.scheduler.name");
  EXPECT_NE(std::string(e.what()).find(registered_choices(kScheduleKey).list()), std::string::npos);
  const auto strategy = error_of_text("parallel:\n  strategy: zero-7\n");
  EXPECT_NE(std::string(strategy.what()).find(registered_choices(kStrategyKey).list()), std::string::npos);
}

TEST(RunConfigYaml, RegisteredNamesMatchWithoutRegardToCaseAndBecomeCanonical) {
  const RunConfig c = parse_run_config(
      "model:\n  name: LeNet\noptim:\n  name: Adam\n  loss: CrossEntropyLoss\ndata:\n  dataset: "
      "FashionMNIST\nparallel:\n  strategy: Data_Parallel\n");
  EXPECT_EQ(c.model.name, "lenet5");
  EXPECT_EQ(c.optim.name, "adam");
  EXPECT_EQ(c.optim.loss, "cross_entropy");
  EXPECT_EQ(c.data.dataset, "fashion-mnist");
  EXPECT_EQ(c.parallel.strategy, "data_parallel");
  for (const char* key :
       {kModelKey, kOptimizerKey, kScheduleKey, kLossKey, kDatasetKey, kPartitionKey, kStrategyKey}) {
    EXPECT_FALSE(registered_choices(key).empty()) << key;
  }
}

TEST(RunConfigYaml, SuggestionsForNamesIgnoreCaseAsMatchingDoes) {
  EXPECT_STREQ(error_of_text("model:\n  name: MNISTNets\n").what(),
               ("x.yaml:2: model.name: expected one of " + registered_choices(kModelKey).list() +
                "; found \"MNISTNets\"; did you mean mnistnet?")
                   .c_str());
}

TEST(RunConfigYaml, RunFolderIsDatedOrNamed) {
  EXPECT_EQ(RunConfig{}.run_folder, RunFolder::Dated);
  EXPECT_EQ(parse_run_config("run_folder: Named\n").run_folder, RunFolder::Named);
  EXPECT_STREQ(error_of_text("run_folder: seed\n").what(),
               "x.yaml:1: run_folder: expected one of dated, named; found \"seed\"");
  // <out_dir>/<name>/ must be a folder of out_dir's own.
  for (const char* name : {".", ".."}) {
    EXPECT_STREQ(error_of_text(std::string("name: '") + name + "'\n").what(),
                 (std::string("x.yaml:1: name: expected a name without '/' or control characters, not . or "
                              ".. (it names the run "
                              "folder), found the quoted string \"") +
                  name + "\"")
                     .c_str());
  }
}

TEST(RunConfigYaml, AFlagOverrideIsNamedAsTheFlagWasGiven) {
  const std::vector<Override> lr{Override{"optim.lr", "fast", "--lr fast", /*flag=*/true}};
  EXPECT_STREQ(error_of([&] { run_config_from_text("name: a\n", "x.yaml", lr); }).what(),
               "--lr fast: optim.lr: expected a positive number, found \"fast\"");
  const std::vector<Override> broken{Override{"optim.lr", "[1", "--lr [1", true}};
  const auto e = error_of([&] { run_config_from_text("", "x.yaml", broken); });
  EXPECT_EQ(std::string(e.what()).rfind("--lr [1: optim.lr: the value is not valid YAML", 0), 0u) << e.what();
  // Without the flag mark, the same override is named as key=value.
  EXPECT_EQ(origin_of(Override{"optim.lr", "fast", "optim.lr=fast"}), "override \"optim.lr=fast\"");
  EXPECT_DOUBLE_EQ(
      run_config_from_text("optim: {lr: 0.5}\n", "x.yaml", {Override{"optim.lr", "0.25", "--lr 0.25", true}})
          .optim.lr,
      0.25);
}

TEST(RunConfigYaml, OnlyTheChosenStrategysSectionApplies) {
  const RunConfig dp =
      parse_run_config("parallel:\n  strategy: data_parallel\n  data_parallel:\n    bucket_mb: 2\n");
  EXPECT_DOUBLE_EQ(dp.parallel.options.get<parallel::DataParallelStrategyOptions>("data_parallel").bucket_mb,
                   2.0);
  // Written back with its section; another strategy's section is not written.
  EXPECT_NE(to_yaml(dp).find("bucket_mb: 2"), std::string::npos);
  const RunConfig local = parse_run_config("parallel:\n  strategy: local\n");
  EXPECT_EQ(to_yaml(local).find("data_parallel"), std::string::npos);
  EXPECT_TRUE(parse_run_config(to_yaml(local)) == local);
  // Options of a strategy that is not chosen would be accepted and ignored: refused instead.
  EXPECT_STREQ(
      error_of_text("parallel:\n  strategy: local\n  data_parallel:\n    bucket_mb: 2\n").what(),
      "x.yaml:3: parallel.data_parallel: options of strategy data_parallel, but parallel.strategy is "
      "local; remove the section (on the command line: parallel.data_parallel=null) or set "
      "parallel.strategy: data_parallel");
}

// The value under a dotted key.
YAML::Node value_at(const YAML::Node& node, const std::string& key) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return node[key];
  return value_at(node[key.substr(0, dot)], key.substr(dot + 1));
}

TEST(RunConfigYaml, KeyHelpListsEveryOptionWithTheDefaultConfigYamlWrites) {
  const auto all = config_keys();
  const auto help = config_key_help();
  std::vector<std::string> listed;
  for (const auto& k : help) listed.push_back(k.key);
  // Every key but the sections, in the same order.
  std::vector<std::string> options;
  for (const auto& key : all) {
    const bool section =
        std::any_of(all.begin(), all.end(), [&](const std::string& o) { return o.rfind(key + ".", 0) == 0; });
    if (!section) options.push_back(key);
  }
  EXPECT_EQ(listed, options);
  const YAML::Node written = to_yaml_node(RunConfig{});
  for (const auto& k : help) {
    EXPECT_FALSE(k.help.empty()) << k.key << " has no help";
    EXPECT_EQ(k.help.find('\n'), std::string::npos) << k.key;
    // config.yaml writes only the chosen strategy's section, and the chosen model's.
    if (k.key.rfind("parallel.", 0) == 0 && std::count(k.key.begin(), k.key.end(), '.') > 1) continue;
    if (k.key.rfind("model.albert.", 0) == 0) continue;
    if (k.key.rfind("model.", 0) == 0 && !model_key_unused(RunConfig{}.model.name, k.key.substr(6)).empty())
      continue;
    YAML::Emitter value;
    value << YAML::Flow << value_at(written, k.key);
    EXPECT_EQ(k.default_text, value.c_str()) << k.key;
  }
  const auto find = [&](const std::string& key) {
    return *std::find_if(help.begin(), help.end(), [&](const KeyHelp& k) { return k.key == key; });
  };
  EXPECT_EQ(find("train.max_steps").default_text, "0");
  EXPECT_EQ(find("data.root").default_text, "\"\"");
  EXPECT_EQ(find("data.synthetic_shape").default_text, "[1, 28, 28]");
  EXPECT_EQ(find("optim.lr").default_text, "0.01");
  EXPECT_EQ(find("data.equalize").allowed, "pad, drop, join");
  EXPECT_EQ(find("parallel.data_parallel.bucket_mb").default_text, "25.0");
}

TEST(RunConfigErrors, StructuralErrors) {
  EXPECT_STREQ(error_of_text("data: 3\n").what(),
               "x.yaml:1: data: expected a section of indented key: value lines, found \"3\"");
  EXPECT_STREQ(error_of_text("optim:\n  lr: [1, 2]\n").what(),
               "x.yaml:2: optim.lr: expected a positive number, found a sequence");
  EXPECT_STREQ(error_of_text("data:\n  drop_last: maybe\n").what(),
               "x.yaml:2: data.drop_last: expected true or false, found \"maybe\"");
  EXPECT_STREQ(error_of_text("name: a\nname: b\n").what(),
               "x.yaml:2: duplicate key name; keep one of the two entries");
  const auto syntax = error_of_text("optim:\n  lr: [1, 2\n");
  EXPECT_EQ(syntax.where().rfind("x.yaml:", 0), 0u) << syntax.what();
  EXPECT_NE(std::string(syntax.what()).find("invalid YAML"), std::string::npos);
  const auto missing = error_of([] { load_run_config("/nonexistent/x.yaml"); });
  EXPECT_EQ(missing.where(), "/nonexistent/x.yaml");
}

TEST(RunConfigErrors, BadOverrideIsNamed) {
  const std::string yaml = "optim:\n  lr: 0.1\n";
  EXPECT_STREQ(error_of_text(yaml, {"optim.lr=fast"}).what(),
               "override \"optim.lr=fast\": optim.lr: expected a positive number, found \"fast\"");
  EXPECT_STREQ(error_of_text(yaml, {"optim.lrr=0.1"}).what(),
               "override \"optim.lrr=0.1\": unknown key optim.lrr; did you mean optim.lr?");
  const auto no_equals = error_of_text(yaml, {"optim.lr"});
  EXPECT_EQ(no_equals.where(), "override \"optim.lr\"");
  const auto bad_yaml = error_of_text(yaml, {"data.synthetic_shape=[3,32"});
  EXPECT_EQ(bad_yaml.where(), "override \"data.synthetic_shape=[3,32\"");
  EXPECT_EQ(bad_yaml.key(), "data.synthetic_shape");
  const auto through_value = error_of_text(yaml, {"optim.lr.x=1"});
  EXPECT_STREQ(through_value.what(),
               "override \"optim.lr.x=1\": optim.lr.x: optim.lr is a value, not a section with keys; "
               "override optim.lr itself instead");
  const auto bad_key = error_of_text(yaml, {"optim..lr=1"});
  EXPECT_EQ(bad_key.where(), "override \"optim..lr=1\"");
  // Errors elsewhere in the file still name the file, not an unrelated override.
  EXPECT_STREQ(error_of_text("data:\n  batch_size: x\n", {"optim.lr=0.5"}).what(),
               "x.yaml:2: data.batch_size: expected a positive integer, found \"x\"");
}

TEST(RunConfigErrors, FileLineFromARealFile) {
  const dtrain::testing::ScratchDir dir;
  const std::string path = (dir / "dtrain_config_bad.yaml").string();
  {
    std::ofstream out(path);
    out << "# comment\nname: r\n\ntrain:\n  epochs: 2\n  device: tpu\n";
  }
  const auto e = error_of([&] { load_run_config(path); });
  EXPECT_EQ(e.where(), path + ":6");
  EXPECT_EQ(e.key(), "train.device");
}

}  // namespace
}  // namespace dtrain::config
