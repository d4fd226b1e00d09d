// A scratch folder for one test: a fresh, empty folder under the system's temporary folder (TMPDIR),
// removed with everything in it when the ScratchDir goes out of scope, so tests never see each
// other's files.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp

#include <cctype>
#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace dtrain::testing {

class ScratchDir {
 public:
  // The name starts with the running test's name, so a folder a crashed test left behind says whose it
  // is. mkdtemp picks the rest of the name and creates the folder in one step, so test processes run in
  // parallel (ctest -j) never share a folder, whatever their pids or test names.
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / (name_prefix() + "-XXXXXX")).string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (::mkdtemp(buffer.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "ScratchDir: mkdtemp " + pattern);
    path_ = buffer.data();
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string string() const { return path_.string(); }
  std::filesystem::path operator/(const std::filesystem::path& name) const { return path_ / name; }

 private:
  // "dtrain-Suite.Test": parameterised names hold '/', which would make a nested folder, so anything
  // but letters, digits, '-' and '.' becomes '_'; long names are cut to stay far below NAME_MAX.
  static std::string name_prefix() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "test";
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
    }
    return "dtrain-" + name.substr(0, 100);
  }

  std::filesystem::path path_;
};

}  // namespace dtrain::testing
