// results.json and friends.
#include "dtrain/io/JsonFile.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

#include "dtrain/io/AtomicFile.h"

namespace dtrain::io {

void write_json_file(const std::filesystem::path& path, const nlohmann::json& value) {
  write_file_atomic(path, value.dump(2) + "\n");
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string() + "; check the path");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + " is not valid JSON (" + e.what() + ")");
  }
}

}  // namespace dtrain::io
