// `dtrain train` on a word-level corpus in WikiText's layout, end to end through the real binary:
// the study's pipeline experiment (configs/wikitext2.yaml: PyTorch's word-level Transformer language
// model cut into two pipeline stages on two workers) on the bundled sample, its test perplexity
// falling from the untrained model's and reported in results.json beside the loss; and gpt, whose
// output layer is tied to its token embedding, cut into the same two stages.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/CliTestUtil.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

TEST(LanguageModelCommand, TheStudysPipelineModelLearnsTheWikiTextSample) {
  const dtrain::testing::ScratchDir dir;
  const auto out =
      run(std::string("train ") + DTRAIN_CONFIGS + "/wikitext2.yaml data.root=" + DTRAIN_WIKITEXT_SAMPLE +
              " out_dir=" + (dir / "runs").string() + " train.epochs=3 train.checkpoint_every_epochs=0",
          dir.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto results = last_json_line(out.out);
  EXPECT_EQ(results["strategy"], "pipeline");
  EXPECT_EQ(results["world_size"], 2);
  const auto& final = results["final"];
  ASSERT_TRUE(final.contains("perplexity")) << final.dump();
  EXPECT_NEAR(final["perplexity"].get<double>(), std::exp(final["loss"].get<double>()), 1e-9);
  // 102 words: the vocabulary is small enough for the class figures.
  EXPECT_TRUE(final.contains("mcc")) << final.dump();

  // The untrained model's perplexity (train.eval_at_start) against the last evaluation's.
  std::vector<double> perplexities;
  std::ifstream lines(fs::path(results["run_dir"].get<std::string>()) / "metrics.jsonl");
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("val/perplexity")) perplexities.push_back(record["val/perplexity"].get<double>());
  }
  ASSERT_GE(perplexities.size(), 2u);
  EXPECT_LT(perplexities.back(), 0.5 * perplexities.front())
      << "perplexity " << perplexities.front() << " -> " << perplexities.back();
  std::printf("wikitext sample, 3 epochs: test perplexity %.1f -> %.1f\n", perplexities.front(),
              perplexities.back());
}

// The untrained model's test perplexity (train.eval_at_start) and the last evaluation's.
std::vector<double> test_perplexities(const nlohmann::json& results) {
  std::vector<double> perplexities;
  std::ifstream lines(fs::path(results["run_dir"].get<std::string>()) / "metrics.jsonl");
  for (std::string line; std::getline(lines, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.contains("val/perplexity")) perplexities.push_back(record["val/perplexity"].get<double>());
  }
  return perplexities;
}

TEST(LanguageModelCommand, GptWithTiedEmbeddingsLearnsTheWikiTextSampleAsATwoStagePipeline) {
  const dtrain::testing::ScratchDir dir;
  const auto out =
      run(std::string("train ") + DTRAIN_CONFIGS + "/gpt-wikitext.yaml data.root=" + DTRAIN_WIKITEXT_SAMPLE +
              " out_dir=" + (dir / "runs").string() +
              " --nproc 2 parallel.strategy=pipeline parallel.pipeline.stages=2 train.epochs=6",
          dir.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto results = last_json_line(out.out);
  EXPECT_EQ(results["strategy"], "pipeline");
  EXPECT_EQ(results["world_size"], 2);
  const auto perplexities = test_perplexities(results);
  ASSERT_GE(perplexities.size(), 2u);
  EXPECT_LT(perplexities.back(), 0.5 * perplexities.front())
      << "perplexity " << perplexities.front() << " -> " << perplexities.back();
  std::printf("gpt on the wikitext sample, 6 epochs, 2 stages: test perplexity %.1f -> %.1f\n",
              perplexities.front(), perplexities.back());
}

}  // namespace
