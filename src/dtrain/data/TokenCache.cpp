// The token cache file; see TokenCache.h. Layout, native byte order (a cache is read where it was
// written, or made again): the 8-byte magic, the key's four fields, the row count, then the tokens
// (rows x seq_len int32) and the labels (rows int64).
#include "dtrain/data/TokenCache.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace dtrain::data {
namespace {

constexpr std::array<char, 8> kMagic{'D', 'T', 'T', 'O', 'K', 'v', '1', '\n'};

struct Header {
  std::array<char, 8> magic{};
  TokenCacheKey key;
  std::int64_t rows = 0;
};

template <class T>
bool read_value(std::istream& in, T& value) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&value), sizeof(T)));
}

template <class T>
void write_value(std::ostream& out, const T& value) {
  out.write(reinterpret_cast<const char*>(&value), sizeof(T));
}

bool same(const TokenCacheKey& a, const TokenCacheKey& b) {
  return a.model_hash == b.model_hash && a.data_hash == b.data_hash && a.settings_hash == b.settings_hash &&
         a.seq_len == b.seq_len;
}

}  // namespace

std::string token_cache_path(const std::string& data_path) {
  return data_path + ".dtrain-tokens";
}

std::optional<TokenizedSentences> read_token_cache(const std::string& path, const TokenCacheKey& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  Header h;
  if (!read_value(in, h.magic) || h.magic != kMagic) return std::nullopt;
  if (!read_value(in, h.key.model_hash) || !read_value(in, h.key.data_hash) ||
      !read_value(in, h.key.settings_hash) || !read_value(in, h.key.seq_len) || !read_value(in, h.rows)) {
    return std::nullopt;
  }
  if (!same(h.key, key) || h.rows < 0 || h.key.seq_len <= 0) return std::nullopt;
  // A truncated or padded file is not trusted: its size is exactly what the header says.
  const auto header_bytes = static_cast<std::uintmax_t>(in.tellg());
  const auto body =
      static_cast<std::uintmax_t>(h.rows) * (static_cast<std::uintmax_t>(h.key.seq_len) * 4 + 8);
  std::error_code error;
  if (std::filesystem::file_size(path, error) != header_bytes + body || error) return std::nullopt;
  TokenizedSentences out;
  out.tokens = torch::empty({h.rows, h.key.seq_len}, torch::kInt);
  out.labels = torch::empty({h.rows}, torch::kLong);
  in.read(reinterpret_cast<char*>(out.tokens.data_ptr<std::int32_t>()),
          static_cast<std::streamsize>(out.tokens.numel() * 4));
  in.read(reinterpret_cast<char*>(out.labels.data_ptr<std::int64_t>()),
          static_cast<std::streamsize>(out.labels.numel() * 8));
  if (!in) return std::nullopt;
  return out;
}

bool write_token_cache(const std::string& path, const TokenCacheKey& key,
                       const TokenizedSentences& sentences) {
  TORCH_INTERNAL_ASSERT(sentences.tokens.scalar_type() == torch::kInt && sentences.tokens.dim() == 2 &&
                        sentences.tokens.size(1) == key.seq_len && sentences.tokens.is_contiguous());
  TORCH_INTERNAL_ASSERT(sentences.labels.scalar_type() == torch::kLong &&
                        sentences.labels.size(0) == sentences.tokens.size(0) &&
                        sentences.labels.is_contiguous());
  // A name of this process and call: ranks and threads writing the same cache never share one.
  static std::atomic<int> counter{0};
  const auto temporary = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    write_value(out, kMagic);
    write_value(out, key.model_hash);
    write_value(out, key.data_hash);
    write_value(out, key.settings_hash);
    write_value(out, key.seq_len);
    write_value(out, static_cast<std::int64_t>(sentences.tokens.size(0)));
    out.write(reinterpret_cast<const char*>(sentences.tokens.data_ptr<std::int32_t>()),
              static_cast<std::streamsize>(sentences.tokens.numel() * 4));
    out.write(reinterpret_cast<const char*>(sentences.labels.data_ptr<std::int64_t>()),
              static_cast<std::streamsize>(sentences.labels.numel() * 8));
    out.flush();
    if (!out) {
      out.close();
      std::remove(temporary.c_str());
      return false;
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) std::remove(temporary.c_str());
  return !error;
}

}  // namespace dtrain::data
