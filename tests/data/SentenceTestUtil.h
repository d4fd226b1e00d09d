// Helpers for the sentence tests: the bundled CoLA-layout sample (cola_sample/: made-up sentences),
// a SentencePiece model trained once per test process from its training sentences, and a copy of
// the sample in a scratch folder for tests that write token caches beside it.
#pragma once

#include <filesystem>
#include <string>

#include "DataTestUtil.h"
#include "dtrain/data/SentenceFile.h"
#include "dtrain/data/Tokenizer.h"

namespace dtrain::data::testing {

inline std::string cola_sample(const std::string& file) {
  return (std::filesystem::path(DTRAIN_COLA_SAMPLE) / file).string();
}

// A unigram model of at most `vocab_size` pieces from the sample's training sentences, written once
// per process and size into a folder removed at exit.
inline std::string sample_model(int vocab_size = 100) {
  static TempDir dir;
  const auto prefix = dir / ("spiece" + std::to_string(vocab_size));
  if (std::filesystem::exists(prefix + ".model")) return prefix + ".model";
  const auto path = cola_sample("train.tsv");
  const auto rows = parse_sentences(path, read_sentence_file(path), config::SentenceFormat::Cola, nullptr);
  TokenizerTrainOptions options;
  options.model_prefix = prefix;
  options.vocab_size = vocab_size;
  return train_tokenizer(rows.sentences, options);
}

inline void copy_sample(const std::string& to) {
  std::filesystem::create_directories(to);
  for (const char* name : {"train.tsv", "dev.tsv"}) {
    std::filesystem::copy_file(cola_sample(name), std::filesystem::path(to) / name,
                               std::filesystem::copy_options::overwrite_existing);
  }
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace dtrain::data::testing
