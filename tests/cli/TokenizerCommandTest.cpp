// `dtrain tokenizer train` and a `dtrain train` on the sentences it tokenizes, end to end through the
// real binary: a model with ALBERT's special pieces learnt from the bundled CoLA sample, then a
// transformer classifier and ALBERT trained on that sample for a few steps, the results carrying
// Matthews correlation and per-class figures.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/CliTestUtil.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

class TokenizerCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(dir_ / "cola");
    for (const char* name : {"train.tsv", "dev.tsv"})
      fs::copy_file(fs::path(DTRAIN_COLA_SAMPLE) / name, dir_ / "cola" / name);
  }
  dtrain::testing::ScratchDir dir_;
};

TEST_F(TokenizerCommand, TrainsAModelThenATransformerOnCola) {
  const auto made = run("tokenizer train --input " + (dir_ / "cola/train.tsv").string() + " --model-prefix " +
                            (dir_ / "spiece").string() + " --vocab-size 100",
                        dir_.path());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const auto model = last_json_line(made.out);
  EXPECT_EQ(model["sentences"], 36);
  EXPECT_EQ(model["vocab_size"], 100);
  EXPECT_EQ(model["pad_id"], 0);
  EXPECT_EQ(model["unk_id"], 1);
  EXPECT_EQ(model["cls_id"], 2);
  EXPECT_EQ(model["sep_id"], 3);
  ASSERT_TRUE(fs::exists(dir_ / "spiece.model"));

  std::ofstream(dir_ / "cola.yaml")
      << "name: cola\nout_dir: " << (dir_ / "runs").string()
      << "\nnproc: 1\n"
         "data: {dataset: sentences, root: "
      << (dir_ / "cola").string() << ", tokenizer: " << (dir_ / "spiece.model").string()
      << ", seq_len: 24, batch_size: 8, eval_batch_size: 12}\n"
         "model: {name: transformer, task: classifier, dim: 16, depth: 1, heads: 2}\n"
         "optim: {name: adamw, lr: 0.003}\n"
         "parallel: {strategy: local}\n"
         "train: {epochs: 2, max_steps: 6, checkpoint_every_epochs: 0, seed: 1}\n";
  const auto trained = run("train " + (dir_ / "cola.yaml").string(), dir_.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const auto results = last_json_line(trained.out);
  EXPECT_EQ(results["steps"], 6);
  const auto& final_eval = results["final"];
  EXPECT_EQ(final_eval["samples"], 12);
  ASSERT_TRUE(final_eval.contains("mcc")) << final_eval.dump();
  EXPECT_GE(final_eval["mcc"].get<double>(), -1.0);
  EXPECT_LE(final_eval["mcc"].get<double>(), 1.0);
  ASSERT_EQ(final_eval["per_class"].size(), 2u) << final_eval.dump();
  EXPECT_EQ(final_eval["per_class"][1]["name"], "1");
  EXPECT_EQ(
      final_eval["per_class"][0]["samples"].get<int>() + final_eval["per_class"][1]["samples"].get<int>(),
      12);
  EXPECT_TRUE(fs::exists(dir_ / "cola/train.tsv.dtrain-tokens"));
  const fs::path run_dir = results["run_dir"].get<std::string>();
  std::ifstream metrics(run_dir / "metrics.jsonl");
  const std::string lines((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_NE(lines.find("\"val/mcc\""), std::string::npos);
  std::ifstream per_class(run_dir / "per_class.csv");
  std::string header;
  std::getline(per_class, header);
  EXPECT_EQ(header, "class,name,samples,precision,recall,f1");
}

TEST_F(TokenizerCommand, TrainsAlbertOnColaWithTheDataSetsVocabulary) {
  ASSERT_EQ(run("tokenizer train --input " + (dir_ / "cola/train.tsv").string() + " --model-prefix " +
                    (dir_ / "spiece").string() + " --vocab-size 100",
                dir_.path())
                .exit_code,
            0);
  std::ofstream(dir_ / "albert.yaml")
      << "name: albert-cola\nout_dir: " << (dir_ / "runs").string()
      << "\nnproc: 1\n"
         "data: {dataset: sentences, root: "
      << (dir_ / "cola").string() << ", tokenizer: " << (dir_ / "spiece.model").string()
      << ", seq_len: 24, batch_size: 8, eval_batch_size: 12}\n"
         "model: {name: albert, size: tiny, albert: {num_layers: 1}}\n"
         "optim: {name: adamw, lr: 0.003}\n"
         "parallel: {strategy: local}\n"
         "train: {epochs: 2, max_steps: 6, checkpoint_every_epochs: 0, seed: 1}\n";
  const auto trained = run("train " + (dir_ / "albert.yaml").string(), dir_.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const auto results = last_json_line(trained.out);
  EXPECT_EQ(results["model"], "albert");
  EXPECT_EQ(results["steps"], 6);
  // Tiny ALBERT's parameters other than the word embeddings (12,322), and the tokenizer's 100 pieces
  // at E = 16: the vocabulary is the data set's.
  EXPECT_EQ(results["parameters"], 12322 + 100 * 16);
  // The padding it masks is the tokenizer's <pad>.
  EXPECT_NE(trained.err.find("input tokens T=24 V=100 pad=0 -> 2 classes"), std::string::npos) << trained.err;
  const auto& final_eval = results["final"];
  EXPECT_EQ(final_eval["samples"], 12);
  ASSERT_TRUE(final_eval.contains("mcc")) << final_eval.dump();
  EXPECT_TRUE(std::isfinite(final_eval["loss"].get<double>())) << final_eval.dump();
}

TEST_F(TokenizerCommand, RefusesAnUnknownModelTypeAndAMissingSubcommand) {
  const auto type = run("tokenizer train --input " + (dir_ / "cola/train.tsv").string() + " --model-prefix " +
                            (dir_ / "m").string() + " --model-type wordpiece",
                        dir_.path());
  EXPECT_EQ(type.exit_code, 2) << type.err;
  EXPECT_NE(type.err.find("unknown --model-type 'wordpiece'; expected one of unigram, bpe, char, word"),
            std::string::npos)
      << type.err;
  const auto bare = run("tokenizer", dir_.path());
  EXPECT_EQ(bare.exit_code, 2) << bare.err;
  EXPECT_FALSE(fs::exists(dir_ / "m.model"));
}

TEST_F(TokenizerCommand, ABadRowIsRefusedNamingFileAndLine) {
  std::ofstream(dir_ / "cola/train.tsv", std::ios::app) << "zz01\t3\t\tA label of three.\n";
  std::ofstream(dir_ / "bad.yaml") << "name: bad\nout_dir: " << (dir_ / "runs").string()
                                   << "\nnproc: 1\ndata: {dataset: sentences, root: "
                                   << (dir_ / "cola").string() << ", tokenizer: " << DTRAIN_COLA_SAMPLE
                                   << "/missing.model}\n"
                                   << "model: {name: transformer}\nparallel: {strategy: local}\n";
  const auto missing = run("train " + (dir_ / "bad.yaml").string(), dir_.path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("data.tokenizer: cannot open"), std::string::npos) << missing.err;
  ASSERT_EQ(run("tokenizer train --input " + (dir_ / "cola/dev.tsv").string() + " --model-prefix " +
                    (dir_ / "spiece").string() + " --vocab-size 60",
                dir_.path())
                .exit_code,
            0);
  std::ofstream(dir_ / "bad.yaml") << "name: bad\nout_dir: " << (dir_ / "runs").string()
                                   << "\nnproc: 1\ndata: {dataset: sentences, root: "
                                   << (dir_ / "cola").string()
                                   << ", tokenizer: " << (dir_ / "spiece.model").string() << "}\n"
                                   << "model: {name: transformer}\nparallel: {strategy: local}\n";
  const auto bad = run("train " + (dir_ / "bad.yaml").string(), dir_.path());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find((dir_ / "cola/train.tsv").string() + ":37: label '3' is not one of 0, 1"),
            std::string::npos)
      << bad.err;
}

}  // namespace
