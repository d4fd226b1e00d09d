// libdtrain_sentencepiece.so: the one place that links libsentencepiece, opened apart from the rest
// of the process (Note [SentencePiece apart] in data/SentencePieceLibrary.h).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <unordered_map>

#include "dtrain/data/SentencePieceLibrary.h"

namespace dtrain::data::detail {
namespace {

class Model final : public SentencePieceModel {
 public:
  int piece_size() const override { return processor.GetPieceSize(); }
  int piece_to_id(std::string_view piece) const override { return processor.PieceToId(piece); }
  std::string id_to_piece(int id) const override { return processor.IdToPiece(id); }
  int pad_id() const override { return processor.pad_id(); }
  int unk_id() const override { return processor.unk_id(); }
  std::string encode(std::string_view text, std::vector<int>& ids) const override {
    const auto status = processor.Encode(text, &ids);
    return status.ok() ? "" : status.ToString();
  }
  std::string decode(const std::vector<int>& ids, std::string& text) const override {
    const auto status = processor.Decode(ids, &text);
    return status.ok() ? "" : status.ToString();
  }

  sentencepiece::SentencePieceProcessor processor;
};

// Feeds the trainer from memory rather than from files.
class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return next_ >= sentences_.size(); }
  void Next() override { ++next_; }
  const std::string& value() const override { return sentences_[next_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  std::size_t next_ = 0;
};

class Library final : public SentencePieceLibrary {
 public:
  std::unique_ptr<SentencePieceModel> load(const std::string& bytes, std::string& error) const override {
    try {
      auto model = std::make_unique<Model>();
      const auto status = model->processor.LoadFromSerializedProto(bytes);
      if (status.ok()) return model;
      error = status.ToString();
    } catch (const std::exception& e) {
      error = e.what();
    }
    return nullptr;
  }

  std::string train(const std::vector<std::pair<std::string, std::string>>& args,
                    const std::vector<std::string>& sentences) const override {
    try {
      const std::unordered_map<std::string, std::string> kwargs(args.begin(), args.end());
      Sentences corpus(sentences);
      const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &corpus);
      return status.ok() ? "" : status.ToString();
    } catch (const std::exception& e) {
      return e.what();
    }
  }
};

}  // namespace
}  // namespace dtrain::data::detail

extern "C" __attribute__((visibility("default"))) const dtrain::data::SentencePieceLibrary*
dtrain_sentencepiece_library() {
  static const dtrain::data::detail::Library library;
  return &library;
}
