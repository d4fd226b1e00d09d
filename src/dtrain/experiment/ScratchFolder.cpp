#include "dtrain/experiment/ScratchFolder.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <stdexcept>
#include <system_error>

namespace dtrain::experiment {

namespace fs = std::filesystem;

ScratchFolder::ScratchFolder(const std::string& prefix, const std::string& what) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) {
    throw std::runtime_error(
        fmt::format("{}: cannot make a temporary folder in {}", what, fs::temp_directory_path().string()));
  }
  path_ = pattern;
}

ScratchFolder::~ScratchFolder() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

}  // namespace dtrain::experiment
