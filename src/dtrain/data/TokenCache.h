// Tokenized sentences kept beside their data file (train.tsv -> train.tsv.dtrain-tokens), so that a
// run after the first reads ids instead of parsing and tokenizing again. A cache is used only when it
// was made from the same data bytes by the same tokenizer model with the same length, layout and
// labels; otherwise (or when it is damaged) it is made again.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain::data {

struct TokenCacheKey {
  std::uint64_t model_hash = 0;     // FNV-1a of the tokenizer model's bytes
  std::uint64_t data_hash = 0;      // FNV-1a of the data file's bytes
  std::uint64_t settings_hash = 0;  // of seq_len, the row layout and the label set
  std::int64_t seq_len = 0;
};

struct TokenizedSentences {
  torch::Tensor tokens;  // (N, seq_len) int32
  torch::Tensor labels;  // (N) int64
};

// "<data_path>.dtrain-tokens"
std::string token_cache_path(const std::string& data_path);

// The cache at `path` when it exists, is whole and was made under `key`; nullopt otherwise.
std::optional<TokenizedSentences> read_token_cache(const std::string& path, const TokenCacheKey& key);

// Writes the cache through a temporary file renamed into place, so that ranks loading the same data
// at once never read half a file. Returns false, writing nothing, where the folder is not writable
// (a data set under /usr/share): the cache only saves time.
bool write_token_cache(const std::string& path, const TokenCacheKey& key,
                       const TokenizedSentences& sentences);

}  // namespace dtrain::data
