// `dtrain tokenizer train`: a SentencePiece model with ALBERT's special pieces, learnt from a corpus,
// for data.tokenizer when ALBERT's own spiece.model is not at hand. A sentence file of the sentences
// data set (.tsv, .jsonl) gives its sentence column; any other file one sentence a line.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/cli/Commands.h"
#include "dtrain/data/SentenceFile.h"
#include "dtrain/data/Tokenizer.h"

namespace dtrain::cli {
namespace {

struct TokenizerTrainArgs {
  std::vector<std::string> inputs;
  std::string model_prefix;
  int vocab_size = 8000;
  std::string model_type = "unigram";
  double character_coverage = 0.9995;
};

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The sentences of one corpus file.
void add_sentences(const std::string& path, std::vector<std::string>& sentences) {
  const auto contents = data::read_sentence_file(path);
  if (ends_with(path, ".tsv") || ends_with(path, ".jsonl")) {
    const auto format = data::detect_sentence_format(path, contents);
    auto rows = data::parse_sentences(path, contents, format, /*labels=*/nullptr);
    for (auto& s : rows.sentences) sentences.push_back(std::move(s));
    return;
  }
  std::size_t start = 0;
  while (start < contents.size()) {
    const auto end = std::min(contents.find('\n', start), contents.size());
    if (end > start) sentences.push_back(contents.substr(start, end - start));
    start = end + 1;
  }
}

int run_train(const TokenizerTrainArgs& a) {
  data::TokenizerTrainOptions o;
  o.model_prefix = a.model_prefix;
  o.vocab_size = a.vocab_size;
  o.model_type = data::kPieceModelNames.parse(a.model_type, "--model-type");
  o.character_coverage = a.character_coverage;
  std::vector<std::string> sentences;
  for (const auto& path : a.inputs) add_sentences(path, sentences);
  const auto model = data::train_tokenizer(sentences, o);
  const data::Tokenizer tokenizer(model);
  nlohmann::json line;
  line["model"] = model;
  line["sentences"] = sentences.size();
  line["vocab_size"] = tokenizer.vocab_size();
  line["pad_id"] = tokenizer.pad_id();
  line["unk_id"] = tokenizer.unk_id();
  line["cls_id"] = tokenizer.cls_id();
  line["sep_id"] = tokenizer.sep_id();
  std::cout << line.dump() << std::endl;
  std::cerr << fmt::format("tokenizer: {} pieces from {} sentences in {}\n", tokenizer.vocab_size(),
                           sentences.size(), model);
  return kExitSuccess;
}

}  // namespace

Run add_tokenizer_command(CLI::App& app) {
  auto* tokenizer = app.add_subcommand(
      "tokenizer", "SentencePiece models for the sentences data set: `dtrain tokenizer train` learns one");
  tokenizer->require_subcommand(1);
  auto args = std::make_shared<TokenizerTrainArgs>();
  auto* train =
      tokenizer->add_subcommand("train",
                                "Learn a SentencePiece model with ALBERT's special pieces (<pad> 0, <unk> 1, "
                                "[CLS] 2, [SEP] 3, [MASK] 4); "
                                "writes PREFIX.model and PREFIX.vocab, and one JSON line on stdout");
  train
      ->add_option(
          "--input", args->inputs,
          "Corpus files: a .tsv or .jsonl sentence file gives its sentences, any other file one a line")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("--model-prefix", args->model_prefix, "Write PREFIX.model and PREFIX.vocab")->required();
  train->add_option("--vocab-size", args->vocab_size, "Pieces at most (a small corpus gets fewer)")
      ->capture_default_str()
      ->check(at_least(6));
  train->add_option("--model-type", args->model_type, "unigram (ALBERT's) | bpe | char | word")
      ->capture_default_str();
  train
      ->add_option("--character-coverage", args->character_coverage,
                   "Share of the corpus's characters the pieces cover")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 1.0));
  return [args, train]() -> int {
    if (!train->parsed()) throw UsageError("tokenizer: expected a subcommand: train");
    return run_train(*args);
  };
}

}  // namespace dtrain::cli
