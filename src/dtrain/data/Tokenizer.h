// SentencePiece tokenization as ALBERT does it: a sentence becomes [CLS] pieces [SEP], truncated or
// padded with <pad> to a fixed length. Loads ALBERT's spiece.model (or any SentencePiece model with
// those pieces) and trains one from a corpus with the same special pieces (`dtrain tokenizer train`).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/util/EnumNames.h"

namespace dtrain::data {

class SentencePieceModel;

class Tokenizer {
 public:
  // Reads a SentencePiece model; throws naming the file when it cannot be read or parsed, or when
  // it lacks a piece ALBERT's encoding needs (<pad>, [CLS], [SEP]).
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const std::string& path() const { return path_; }
  // FNV-1a of the model file's bytes: what a token cache is keyed by.
  std::uint64_t model_hash() const { return model_hash_; }
  std::int64_t vocab_size() const;
  std::int32_t pad_id() const { return pad_id_; }
  std::int32_t unk_id() const { return unk_id_; }
  std::int32_t cls_id() const { return cls_id_; }
  std::int32_t sep_id() const { return sep_id_; }

  // The sentence's piece ids, without special pieces.
  std::vector<std::int32_t> pieces(std::string_view text) const;
  // [CLS] pieces [SEP] in out[0, seq_len): pieces beyond seq_len - 2 are dropped (the [SEP] stays
  // last), the rest is pad_id(). Returns how many positions are not padding. seq_len >= 3.
  std::int64_t encode(std::string_view text, std::int64_t seq_len, std::int32_t* out) const;
  // The piece of an id ("[CLS]", "▁the").
  std::string piece(std::int32_t id) const;
  // The text of `ids`, special pieces and padding left out.
  std::string decode(const std::vector<std::int32_t>& ids) const;

 private:
  std::string path_;
  std::unique_ptr<SentencePieceModel> model_;
  std::uint64_t model_hash_ = 0;
  std::int32_t pad_id_ = -1;
  std::int32_t unk_id_ = -1;
  std::int32_t cls_id_ = -1;
  std::int32_t sep_id_ = -1;
};

// SentencePiece's segmentation algorithms; ALBERT's spiece.model is a unigram model.
enum class PieceModel { Unigram, Bpe, Char, Word };
inline constexpr util::EnumNames<PieceModel, 4> kPieceModelNames{{{{PieceModel::Unigram, "unigram"},
                                                                   {PieceModel::Bpe, "bpe"},
                                                                   {PieceModel::Char, "char"},
                                                                   {PieceModel::Word, "word"}}}};

struct TokenizerTrainOptions {
  std::string model_prefix;  // writes <prefix>.model and <prefix>.vocab
  int vocab_size = 8000;     // an upper bound: a small corpus gets the pieces it has
  PieceModel model_type = PieceModel::Unigram;
  double character_coverage = 0.9995;
};

// Trains a SentencePiece model with ALBERT's special pieces: <pad> = 0, <unk> = 1, [CLS] = 2,
// [SEP] = 3, [MASK] = 4 (control pieces: text never produces them), from `sentences`. Returns the
// model's path. SentencePiece's own log is kept to its warnings and errors.
std::string train_tokenizer(const std::vector<std::string>& sentences, const TokenizerTrainOptions& options);

}  // namespace dtrain::data
