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
//
// Nor does dtrain let LibTorch compile anything else: every other line of a code/ file must be one
// of the declarations OutputArchive writes (`class M(Module):`, `  __parameters__ = ["a", ]`,
// `  __buffers__ = [...]`, `  name : Type`, and `  __annotations__["0"] = Type` for a name that is no
// identifier), or the archive is refused as corrupt. LibTorch 1.13's
// TorchScript compiler trusts that source: fuzzing found a checkpoint whose `__buffers__` was
// mutated to `__bufgers__ = []` (a class constant) crashing it with a SEGV in
// ScriptTypeParser::parseClassConstant while loading; that input is
// tests/fuzz/corpus/checkpoint/class-constant-segv.
#pragma once

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize/input-archive.h>

#include "dtrain/util/ArchiveCheck.h"

#include <cctype>
#include <istream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dtrain::util {

namespace archive_detail {

inline bool is_identifier(const std::string& text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  for (const char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// ["a", "b", ] as OutputArchive writes a name list (names without quotes or backslashes).
inline bool is_name_list(const std::string& text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return false;
  std::size_t pos = 1;
  while (pos + 1 < text.size()) {
    if (text[pos] != '"') return false;
    const auto end = text.find('"', pos + 1);
    if (end == std::string::npos || text.find('\\', pos) < end) return false;
    if (text.compare(end + 1, 2, ", ") != 0) return false;
    pos = end + 3;
  }
  return pos + 1 == text.size();
}

// One line of the class declarations OutputArchive writes (Note [Loading runs no code]).
inline bool is_declaration(const std::string& line) {
  if (line.empty()) return true;
  if (line.rfind("class ", 0) == 0) {
    const std::string tail = "(Module):";
    return line.size() > 6 + tail.size() && line.compare(line.size() - tail.size(), tail.size(), tail) == 0 &&
           is_identifier(line.substr(6, line.size() - 6 - tail.size()));
  }
  if (line.rfind("  ", 0) != 0) return false;
  for (const std::string list : {"  __parameters__ = ", "  __buffers__ = "}) {
    if (line.rfind(list, 0) == 0) return is_name_list(line.substr(list.size()));
  }
  // An attribute whose name is no identifier ("0", as torch::optim's state archives name them) is
  // declared through __annotations__.
  if (line == "  __annotations__ = []") return true;
  std::string type;
  if (line.rfind("  __annotations__[\"", 0) == 0) {
    const auto end = line.find("\"] = ", 19);
    if (end == std::string::npos || line.find_first_of("\"\\", 19) < end) return false;
    type = line.substr(end + 5);
  } else {
    const auto colon = line.find(" : ");
    if (colon == std::string::npos || !is_identifier(line.substr(2, colon - 2))) return false;
    type = line.substr(colon + 3);
  }
  if (type.empty()) return false;
  for (const char c : type) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string("_.[], ").find(c) == std::string::npos) {
      return false;
    }
  }
  return true;
}

}  // namespace archive_detail

// "code/__torch__.py defines def __setstate__(...)" for the first function defined in the
// archive's code, or nullopt when it defines none. Throws std::runtime_error naming the file and
// line when the code holds anything but OutputArchive's declarations, c10::Error when `in` is not a
// zip archive.
inline std::optional<std::string> archive_code(std::istream& in) {
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::optional<std::string> undeclared;
  for (const auto& name : reader.getAllRecords()) {
    if (name.rfind("code/", 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0)
      continue;
    auto [data, size] = reader.getRecord(name);
    std::istringstream source(std::string(static_cast<const char*>(data.get()), size));
    int number = 0;
    for (std::string line; std::getline(source, line);) {
      ++number;
      const auto start = line.find_first_not_of(" \t");
      if (start != std::string::npos && line.compare(start, 4, "def ") == 0) {
        return name + " defines " + line.substr(start, 60);
      }
      if (!undeclared && !archive_detail::is_declaration(line)) {
        undeclared = name + " line " + std::to_string(number) +
                     " is not a declaration LibTorch's OutputArchive writes (" + line.substr(0, 60) + ")";
      }
    }
  }
  if (undeclared) throw std::runtime_error(*undeclared);
  return std::nullopt;
}

// Loads `in` into `archive` unless it holds code (Note [Loading runs no code]); then throws
// std::invalid_argument naming `what` (the file, or the checkpoint entry) and the function found.
// An archive that fails check_archive (Note [Checking an archive before LibTorch reads it]) throws
// its std::runtime_error before LibTorch reads a byte of it.
// `device`: where its tensors land (LibTorch's load_from(in, device)); unset, where they were saved.
inline void load_archive_without_code(torch::serialize::InputArchive& archive, std::istream& in,
                                      const std::string& what,
                                      c10::optional<torch::Device> device = c10::nullopt) {
  check_archive(in);
  const auto start = in.tellg();
  if (const auto code = archive_code(in)) {
    throw std::invalid_argument(what + " holds TorchScript code (" + *code +
                                "); dtrain loads tensors only and never runs code from a file");
  }
  in.clear();
  in.seekg(start);
  archive.load_from(in, device);
}

}  // namespace dtrain::util
