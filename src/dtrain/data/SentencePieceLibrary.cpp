// Opening libdtrain_sentencepiece.so; see Note [SentencePiece apart] in SentencePieceLibrary.h.
#include "dtrain/data/SentencePieceLibrary.h"

#include <dlfcn.h>
#include <torch/types.h>

namespace dtrain::data {

const SentencePieceLibrary& sentencepiece_library() {
  static const SentencePieceLibrary* const library = [] {
    int flags = RTLD_NOW | RTLD_LOCAL;
#ifndef DTRAIN_SANITIZED
    flags |= RTLD_DEEPBIND;
#endif
    // Where `cmake --install` puts the module, then where the build made it.
    std::string tried;
    for (const char* path : {DTRAIN_SENTENCEPIECE_MODULE_INSTALLED, DTRAIN_SENTENCEPIECE_MODULE_BUILT}) {
      void* handle = ::dlopen(path, flags);
      const char* error = handle ? nullptr : ::dlerror();
      if (handle) {
        using Get = const SentencePieceLibrary* (*)();
        if (auto get = reinterpret_cast<Get>(::dlsym(handle, "dtrain_sentencepiece_library"))) return get();
        error = "no dtrain_sentencepiece_library in it";
      }
      tried += std::string(tried.empty() ? "" : "; ") + path + ": " + (error ? error : "");
    }
    TORCH_CHECK(false, "tokenizer: cannot open dtrain's SentencePiece module (", tried,
                "); build or install dtrain with libsentencepiece-dev");
    return static_cast<const SentencePieceLibrary*>(nullptr);
  }();
  return *library;
}

}  // namespace dtrain::data
