// The SentencePiece calls the tokenizer makes, as an interface that a module of its own implements
// (data/sentencepiece/Module.cpp, libdtrain_sentencepiece.so), loaded apart from the rest of the
// process on first use.
//
// Note [SentencePiece apart]
// Debian's libsentencepiece carries its own protobuf (3.14) and exports its symbols; LibTorch links
// the system's libprotobuf (3.21). Linked into one program the two interpose on each other: when
// libsentencepiece comes first, libprotobuf's static initialisers call libsentencepiece's copy and
// the program dies before main(); the other order has libsentencepiece's generated code run on
// another protobuf's internals. So no dtrain library links libsentencepiece: the module that does is
// opened with RTLD_LOCAL (its symbols stay out of the program's scope, libprotobuf keeps its own) and
// RTLD_DEEPBIND (libsentencepiece binds to its own protobuf first). Only this interface crosses,
// through virtual calls, so nothing of SentencePiece's is resolved by the program. Sanitizer runtimes
// refuse RTLD_DEEPBIND, so a sanitized build opens the module without it, and there libsentencepiece's
// protobuf calls may bind to LibTorch's libprotobuf.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrain::data {

// One loaded model (SentencePieceProcessor's calls). Errors are returned, never thrown: no
// exception crosses the module's boundary.
class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  virtual int piece_size() const = 0;
  virtual int piece_to_id(std::string_view piece) const = 0;  // unk_id() for a piece it lacks
  virtual std::string id_to_piece(int id) const = 0;
  virtual int pad_id() const = 0;  // -1 when the model declares none
  virtual int unk_id() const = 0;
  // "" on success, else SentencePiece's message.
  virtual std::string encode(std::string_view text, std::vector<int>& ids) const = 0;
  virtual std::string decode(const std::vector<int>& ids, std::string& text) const = 0;
};

class SentencePieceLibrary {
 public:
  virtual ~SentencePieceLibrary() = default;
  // The model serialized in `bytes` (a .model file's contents); null with `error` set if it is none.
  virtual std::unique_ptr<SentencePieceModel> load(const std::string& bytes, std::string& error) const = 0;
  // SentencePieceTrainer over `sentences` with trainer flags `args` ({"model_prefix", "m"}, ...);
  // "" on success, else SentencePiece's message.
  virtual std::string train(const std::vector<std::pair<std::string, std::string>>& args,
                            const std::vector<std::string>& sentences) const = 0;
};

// The module's library, opened on first use (Note [SentencePiece apart]); throws naming the files it
// tried when none opens.
const SentencePieceLibrary& sentencepiece_library();

}  // namespace dtrain::data

// What the module exports: its one library object.
extern "C" const dtrain::data::SentencePieceLibrary* dtrain_sentencepiece_library();
