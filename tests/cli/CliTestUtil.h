// Running the real dtrain binary from end-to-end tests: its exit code, stdout and stderr, and the
// JSON line a command prints last.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/Files.h"

extern char** environ;

namespace dtrain::testing {

namespace fs = std::filesystem;

struct Output {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline Output run(const std::string& args, const fs::path& dir) {
  const auto err_path = dir / "stderr.txt";
  const std::string cmd = std::string(DTRAIN_BINARY) + " " + args + " 2>" + err_path.string();
  Output o;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return o;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.err = read_file(err_path);
  return o;
}

// Starts args[0] with args, stdout to `out_path` and stderr to `err_path`; -1 if it cannot start.
inline pid_t spawn(std::vector<std::string> args, const fs::path& out_path, const fs::path& err_path) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&files, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int failed = posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  return failed ? -1 : pid;
}

inline nlohmann::json last_json_line(const std::string& out) {
  std::istringstream lines(out);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.front() == '{') last = line;
  }
  return nlohmann::json::parse(last);
}

}  // namespace dtrain::testing
