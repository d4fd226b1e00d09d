// SentencePiece behind ALBERT's encoding; see Tokenizer.h.
#include "dtrain/data/Tokenizer.h"

#include <torch/types.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "dtrain/data/SentencePieceLibrary.h"
#include "dtrain/util/Hash.h"

namespace dtrain::data {
namespace {

std::string read_model_file(const std::string& path) {
  TORCH_CHECK(!path.empty(),
              "data.tokenizer: empty; name a SentencePiece model (ALBERT's spiece.model, or one "
              "`dtrain tokenizer train` writes)");
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, "data.tokenizer: cannot open ", path, " for reading");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The id of a piece ALBERT's encoding needs; a model without it would silently map it to <unk>.
std::int32_t required_piece(const SentencePieceModel& model, const char* piece, const std::string& path) {
  const int id = model.piece_to_id(piece);
  TORCH_CHECK(id >= 0 && id != model.unk_id(), "data.tokenizer: ", path, " has no piece ", piece,
              "; ALBERT's encoding needs <pad>, [CLS] and [SEP] (models `dtrain tokenizer train` writes have "
              "them)");
  return id;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& model_path) : path_(model_path) {
  const auto bytes = read_model_file(model_path);
  util::Fnv1a64 hash;
  hash.add(bytes);
  model_hash_ = hash.value();
  std::string error;
  model_ = sentencepiece_library().load(bytes, error);
  TORCH_CHECK(model_, "data.tokenizer: ", model_path, " is not a SentencePiece model (", error, ")");
  unk_id_ = model_->unk_id();
  // ALBERT's spiece.model declares <pad> as its pad id; a model that only has the piece is read alike.
  pad_id_ = model_->pad_id() >= 0 ? model_->pad_id() : required_piece(*model_, "<pad>", model_path);
  cls_id_ = required_piece(*model_, "[CLS]", model_path);
  sep_id_ = required_piece(*model_, "[SEP]", model_path);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::int64_t Tokenizer::vocab_size() const {
  return model_->piece_size();
}

std::vector<std::int32_t> Tokenizer::pieces(std::string_view text) const {
  std::vector<int> ids;
  const auto error = model_->encode(text, ids);
  TORCH_CHECK(error.empty(), "tokenizer ", path_, ": cannot encode \"", text, "\": ", error);
  return {ids.begin(), ids.end()};
}

std::int64_t Tokenizer::encode(std::string_view text, std::int64_t seq_len, std::int32_t* out) const {
  TORCH_CHECK(seq_len >= 3, "data.seq_len: expected >= 3 for [CLS], a piece and [SEP], found ", seq_len);
  const auto ids = pieces(text);
  const auto kept = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), seq_len - 2);
  out[0] = cls_id_;
  std::copy(ids.begin(), ids.begin() + kept, out + 1);
  out[kept + 1] = sep_id_;
  std::fill(out + kept + 2, out + seq_len, pad_id_);
  return kept + 2;
}

std::string Tokenizer::piece(std::int32_t id) const {
  TORCH_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", path_, ": id ", id, " outside the vocabulary of ",
              vocab_size());
  return model_->id_to_piece(id);
}

std::string Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::vector<int> kept;
  for (const auto id : ids) {
    if (id != pad_id_ && id != cls_id_ && id != sep_id_) kept.push_back(id);
  }
  std::string text;
  const auto error = model_->decode(kept, text);
  TORCH_CHECK(error.empty(), "tokenizer ", path_, ": cannot decode: ", error);
  return text;
}

std::string train_tokenizer(const std::vector<std::string>& sentences, const TokenizerTrainOptions& options) {
  TORCH_CHECK(!sentences.empty(), "tokenizer train: no sentences to learn pieces from");
  TORCH_CHECK(!options.model_prefix.empty(), "tokenizer train: the model prefix is empty");
  TORCH_CHECK(options.vocab_size >= 6,
              "tokenizer train: a vocabulary of at least 6 pieces (5 special ones), found ",
              options.vocab_size);
  const std::vector<std::pair<std::string, std::string>> args{
      {"model_prefix", options.model_prefix},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", kPieceModelNames.name(options.model_type)},
      {"character_coverage", std::to_string(options.character_coverage)},
      // ALBERT's special pieces at ALBERT's ids.
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"control_symbols", "[CLS],[SEP],[MASK]"},
      // A small corpus has fewer pieces than asked for: a vocabulary of what it has, not an error.
      {"hard_vocab_limit", "false"},
      {"minloglevel", "1"},
  };
  const auto error = sentencepiece_library().train(args, sentences);
  TORCH_CHECK(error.empty(), "tokenizer train: SentencePiece refused: ", error);
  return options.model_prefix + ".model";
}

}  // namespace dtrain::data
