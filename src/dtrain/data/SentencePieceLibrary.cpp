// Opening libdtrain_sentencepiece.so; see Note [SentencePiece apart] in SentencePieceLibrary.h.
#include "dtrain/data/SentencePieceLibrary.h"

#include <dlfcn.h>
#include <torch/types.h>

#include <filesystem>

namespace dtrain::data {

const SentencePieceLibrary& sentencepiece_library() {
  static const SentencePieceLibrary* const library = [] {
    int flags = RTLD_NOW | RTLD_LOCAL;
#ifndef DTRAIN_SANITIZED
    flags |= RTLD_DEEPBIND;
#endif
    // Beside an installed program (<prefix>/bin/dtrain: <prefix>/lib/dtrain/), wherever the prefix was
    // moved; where `cmake --install` put it; where the build made it.
    std::error_code ignored;
    const auto program = std::filesystem::read_symlink("/proc/self/exe", ignored);
    const auto beside =
        (program.parent_path().parent_path() / "lib" / "dtrain" / "libdtrain_sentencepiece.so").string();
    std::string tried;
    for (const std::string& path : {beside, std::string(DTRAIN_SENTENCEPIECE_MODULE_INSTALLED),
                                    std::string(DTRAIN_SENTENCEPIECE_MODULE_BUILT)}) {
      if (!std::filesystem::exists(path, ignored)) {
        tried += std::string(tried.empty() ? "" : "; ") + path + ": no such file";
        continue;
      }
      void* handle = ::dlopen(path.c_str(), flags);
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
