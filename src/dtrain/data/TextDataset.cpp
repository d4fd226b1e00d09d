// The character-level text set; see TextDataset.h.
#include "dtrain/data/TextDataset.h"

#include <array>
#include <fstream>
#include <iterator>

namespace dtrain::data {

TextDataset::TextDataset(std::string name, torch::Tensor tokens, std::vector<std::string> vocab, int seq_len,
                         std::string separator)
    : name_(std::move(name)),
      tokens_(tokens.contiguous()),
      vocab_(std::move(vocab)),
      separator_(std::move(separator)),
      seq_len_(seq_len) {
  TORCH_CHECK(seq_len >= 1, "data.seq_len: expected >= 1, found ", seq_len);
  TORCH_INTERNAL_ASSERT(tokens_.dim() == 1 && tokens_.scalar_type() == torch::kLong);
  // A window needs seq_len inputs and one more token for its last target.
  size_ = tokens_.numel() > 0 ? (tokens_.numel() - 1) / seq_len_ : 0;
  labels_ = torch::zeros({size_}, torch::kLong);
}

Batch TextDataset::get_batch(const torch::Tensor& indices, std::uint64_t /*augment_seed*/) const {
  // (B, T) positions: window start + offset.
  auto starts = (indices.to(torch::kLong) * seq_len_).unsqueeze(1);
  auto positions = starts + torch::arange(seq_len_, torch::kLong).unsqueeze(0);
  auto flat = positions.reshape({-1});
  auto inputs = tokens_.index_select(0, flat).view(positions.sizes());
  auto targets = tokens_.index_select(0, flat + 1).view(positions.sizes());
  return Batch{inputs, targets};
}

std::string TextDataset::decode(const torch::Tensor& ids) const {
  auto flat = ids.to(torch::kLong).contiguous().view({-1});
  std::string out;
  const auto* p = flat.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < flat.numel(); ++i) {
    TORCH_CHECK(p[i] >= 0 && p[i] < num_classes(), name_, ": token id ", p[i], " outside the vocabulary of ",
                num_classes());
    if (i > 0) out += separator_;
    out += vocab_[static_cast<std::size_t>(p[i])];
  }
  return out;
}

std::shared_ptr<TextDataset> TextDataset::head(std::int64_t n) const {
  TORCH_CHECK(n >= 0, name_, ": subset size must be >= 0, found ", n);
  const std::int64_t keep = std::min(n, size_);
  const std::int64_t length = keep > 0 ? keep * seq_len_ + 1 : 0;
  return std::make_shared<TextDataset>(name_, tokens_.narrow(0, 0, length), vocab_,
                                       static_cast<int>(seq_len_), separator_);
}

TextSplit load_text(const std::string& path, int seq_len) {
  TORCH_CHECK(!path.empty(), "data.text_path: empty; set it to a text file for dataset text");
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, "data.text_path: cannot open ", path, " for reading");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TORCH_CHECK(seq_len >= 1, "data.seq_len: expected >= 1, found ", seq_len);

  std::array<bool, 256> present{};
  for (char c : text) present[static_cast<unsigned char>(c)] = true;
  std::vector<std::string> vocab;
  std::array<std::int64_t, 256> id{};
  for (int b = 0; b < 256; ++b) {
    if (!present[b]) continue;
    id[b] = static_cast<std::int64_t>(vocab.size());
    vocab.emplace_back(1, static_cast<char>(b));
  }
  const auto length = static_cast<std::int64_t>(text.size());
  const std::int64_t test_chars = length / 10;
  const std::int64_t train_chars = length - test_chars;
  TORCH_CHECK(train_chars > seq_len && test_chars > seq_len, path, ": too short: ", length,
              " characters give no full window of data.seq_len = ", seq_len,
              " (+1) in both the train (90%) and ",
              "test (10%) parts; use a longer file or a smaller data.seq_len");
  auto tokens = torch::empty({length}, torch::kLong);
  auto* ids = tokens.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < length; ++i) ids[i] = id[static_cast<unsigned char>(text[i])];
  TextSplit split;
  split.train =
      std::make_shared<TextDataset>("text/train", tokens.narrow(0, 0, train_chars).clone(), vocab, seq_len);
  split.test = std::make_shared<TextDataset>("text/test", tokens.narrow(0, train_chars, test_chars).clone(),
                                             vocab, seq_len);
  return split;
}

}  // namespace dtrain::data
