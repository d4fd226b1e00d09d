// WikiText's word-level corpus (load_word_corpus in TextDataset.h).
#include <fmt/format.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "dtrain/data/TextDataset.h"

namespace dtrain::data {

namespace {

namespace fs = std::filesystem;

constexpr const char* kEos = "<eos>";
constexpr const char* kUnk = "<unk>";

struct Vocabulary {
  std::vector<std::string> words;
  std::unordered_map<std::string, std::int64_t> ids;

  std::int64_t add(const std::string& word) {
    const auto [it, fresh] = ids.emplace(word, static_cast<std::int64_t>(words.size()));
    if (fresh) words.push_back(word);
    return it->second;
  }
};

fs::path corpus_file(const std::string& root, const char* name) {
  const auto path = fs::path(root) / name;
  if (!fs::is_regular_file(path)) {
    throw std::invalid_argument(
        fmt::format("data.root: {} has no {}; data.dataset wikitext reads WikiText's wiki.train.tokens and "
                    "wiki.test.tokens under data.root (the unpacked wikitext-2 or wikitext-103 folder)",
                    root.empty() ? std::string("(empty)") : root, name));
  }
  return path;
}

// The file's words, "<eos>" after each line (PyTorch's word_language_model reads them so). With
// `grow`, unseen words join the vocabulary; otherwise they become <unk>, or are refused.
torch::Tensor read_words(const fs::path& path, Vocabulary& vocab, bool grow) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("data.root: cannot open {} for reading", path.string()));
  std::vector<std::int64_t> ids;
  const auto unk = vocab.ids.find(kUnk);
  std::string line, word;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    std::istringstream words(line);
    while (words >> word) {
      if (grow) {
        ids.push_back(vocab.add(word));
        continue;
      }
      const auto it = vocab.ids.find(word);
      if (it != vocab.ids.end()) {
        ids.push_back(it->second);
      } else if (unk != vocab.ids.end()) {
        ids.push_back(unk->second);
      } else {
        throw std::invalid_argument(fmt::format(
            "{}:{}: word '{}' is not in the training file's vocabulary, which has no <unk> to stand "
            "for it; replace rare words by <unk> as WikiText does",
            path.string(), number, word));
      }
    }
    ids.push_back(grow ? vocab.add(kEos) : vocab.ids.at(kEos));
  }
  return torch::tensor(ids, torch::kLong);
}

}  // namespace

TextSplit load_word_corpus(const std::string& root, int seq_len) {
  TORCH_CHECK(seq_len >= 1, "data.seq_len: expected >= 1, found ", seq_len);
  const auto train_path = corpus_file(root, "wiki.train.tokens");
  const auto test_path = corpus_file(root, "wiki.test.tokens");
  Vocabulary vocab;
  vocab.add(kEos);  // id 0, present even in a file of one line without a newline
  auto train = read_words(train_path, vocab, /*grow=*/true);
  auto test = read_words(test_path, vocab, /*grow=*/false);
  for (const auto& [path, tokens] : {std::pair{train_path, train}, std::pair{test_path, test}}) {
    if (tokens.numel() <= seq_len) {
      throw std::invalid_argument(
          fmt::format("{}: too short: {} words (with <eos>) give no full window of data.seq_len = {} (+1); "
                      "use a longer file "
                      "or a smaller data.seq_len",
                      path.string(), tokens.numel(), seq_len));
    }
  }
  TextSplit split;
  split.train = std::make_shared<TextDataset>("wikitext/train", train, vocab.words, seq_len, " ");
  split.test = std::make_shared<TextDataset>("wikitext/test", test, vocab.words, seq_len, " ");
  return split;
}

}  // namespace dtrain::data
