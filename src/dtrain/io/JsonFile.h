// JSON files a run leaves behind (results.json) and reads back: written atomically, pretty-printed
// so they diff well, read with errors that name the file.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <filesystem>

namespace dtrain::io {

// Atomically replaces `path` with `value`, indented by two spaces.
void write_json_file(const std::filesystem::path& path, const nlohmann::json& value);

// Throws std::runtime_error naming the file when it is missing or not valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace dtrain::io
