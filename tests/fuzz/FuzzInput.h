// What the fuzz targets share: a private scratch folder for the readers that take a path, and the
// libFuzzer entry point's declaration.
#pragma once

#include <c10/util/Logging.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace dtrain::fuzz {

// c10::Error symbolizes a stack trace each time one is thrown (tens of milliseconds); the readers
// refuse most inputs with one, which would make fuzzing a hundred times slower. The message stays.
inline const bool kTorchStackTracesOff = [] {
  c10::SetStackTraceFetcher([] { return std::string("(stack trace not recorded while fuzzing)"); });
  return true;
}();

// A folder of this process's own under $TMPDIR, removed when the process exits normally (a crash
// leaves it for the post-mortem).
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path path;
    Scratch() {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/dtrain-fuzz-XXXXXX";
      if (::mkdtemp(pattern.data()) == nullptr) {
        std::perror("dtrain fuzz: mkdtemp");
        std::abort();
      }
      path = pattern;
    }
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static Scratch scratch;
  return scratch.path;
}

// Writes `bytes` to scratch_dir()/`name` (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const auto path = scratch_dir() / name;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() ||
      std::fclose(file) != 0) {
    std::perror(("dtrain fuzz: cannot write " + path.string()).c_str());
    std::abort();
  }
  return path.string();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A broken property (a round trip that does not give back what went in): print and abort, which
// libFuzzer and the corpus replay both report as a failure with the input saved.
[[noreturn]] inline void property_failed(const std::string& what) {
  std::fprintf(stderr, "dtrain fuzz: property failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace dtrain::fuzz
