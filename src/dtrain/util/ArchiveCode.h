// Loading a LibTorch archive (torch::serialize::InputArchive, i.e. torch::jit::load) without
// running code from it. Header-only over LibTorch's zip reader; every layer that loads an archive
// links LibTorch already.
//
// Note [Loading runs no code]
// An InputArchive is a TorchScript module: besides tensors, its zip may hold TorchScript source
// under code/, and torch::jit::load compiles it and runs a class's __setstate__ while unpickling,
// so a crafted checkpoint could run code (any registered operator, any loop) as it loads. The
// archives dtrain writes (OutputArchive of named tensors) declare one class with attributes and no
// method. So before loading, every code/ file is read and the archive refused if any defines a
// function ("def "): no method, no __setstate__, nothing to run. torch::pickle_load (the state-dict
// export) needs no such check: its unpickler resolves no class outside LibTorch's own tensor
// types and refuses any other GLOBAL (tests/io/LoadRunsNoCodeTest.cpp tries both).
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize/input-archive.h>

#include "dtrain/util/ArchiveCheck.h"

#include <istream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dtrain::util {

// "code/__torch__.py defines def __setstate__(...)" for the first function defined in the
// archive's code, or nullopt when it defines none. Throws c10::Error when `in` is not a zip archive.
inline std::optional<std::string> archive_code(std::istream& in) {
  caffe2::serialize::PyTorchStreamReader reader(&in);
  for (const auto& name : reader.getAllRecords()) {
    if (name.rfind("code/", 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0)
      continue;
    auto [data, size] = reader.getRecord(name);
    std::istringstream source(std::string(static_cast<const char*>(data.get()), size));
    for (std::string line; std::getline(source, line);) {
      const auto start = line.find_first_not_of(" \t");
      if (start != std::string::npos && line.compare(start, 4, "def ") == 0) {
        return name + " defines " + line.substr(start, 60);
      }
    }
  }
  return std::nullopt;
}

// Loads `in` into `archive` unless it holds code (Note [Loading runs no code]); then throws
// std::invalid_argument naming `what` (the file, or the checkpoint entry) and the function found.
// An archive that fails check_archive (Note [Checking an archive before LibTorch reads it]) throws
// its std::runtime_error before LibTorch reads a byte of it.
inline void load_archive_without_code(torch::serialize::InputArchive& archive, std::istream& in,
                                      const std::string& what) {
  check_archive(in);
  const auto start = in.tellg();
  if (const auto code = archive_code(in)) {
    throw std::invalid_argument(what + " holds TorchScript code (" + *code +
                                "); dtrain loads tensors only and never runs code from a file");
  }
  in.clear();
  in.seekg(start);
  archive.load_from(in);
}

}  // namespace dtrain::util
