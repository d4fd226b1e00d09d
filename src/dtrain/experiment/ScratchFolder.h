// A fresh folder under $TMPDIR for runs whose files are read and then dropped: an experiment that
// writes nothing (DiNNO's writeout: false) and the points of `dtrain bench throughput`.
#pragma once

#include <filesystem>
#include <string>

namespace dtrain::experiment {

// <temp>/<prefix>XXXXXX, made at construction and removed with everything in it when this goes out
// of scope, also when a run in it fails.
class ScratchFolder {
 public:
  // Throws std::runtime_error starting with `what` (the command) when no folder can be made.
  ScratchFolder(const std::string& prefix, const std::string& what);
  ~ScratchFolder();
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace dtrain::experiment
