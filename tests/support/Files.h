// A whole file's bytes in one call, read or written, for tests that check what the code wrote.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace dtrain::testing {

// "" for a file that is missing or unreadable: the test's own assertion on the text then fails and
// says what it expected, which names the problem better than an exception from here would.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Replaces the file's content with `bytes`.
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace dtrain::testing
