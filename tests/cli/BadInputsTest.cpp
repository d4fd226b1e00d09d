// The bad-input corpus (tests/cli/bad_inputs/, its README says the format): every malformed
// config, data file, checkpoint and command line there runs through the real dtrain binary and
// must end with its expected exit status and one error line naming what was wrong and where.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <torch/cuda.h>

#include "cli/CliTestUtil.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = DTRAIN_BAD_INPUTS;

struct Expectation {
  int exit_code = -1;
  std::vector<std::string> fragments;  // each in the error line
  std::vector<std::string> absent;     // paths relative to the working folder
  bool needs_no_gpu = false;           // the input is good where LibTorch sees a GPU
};

using dtrain::testing::read_file;

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

Expectation read_expectation(const fs::path& file) {
  Expectation e;
  std::istringstream lines(read_file(file));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.front() == '#') continue;
    const auto space = line.find(' ');
    const std::string word = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (word == "exit") {
      e.exit_code = std::stoi(rest);
    } else if (word == "stderr") {
      e.fragments.push_back(rest);
    } else if (word == "absent") {
      e.absent.push_back(rest);
    } else if (word == "needs" && rest == "no-gpu") {
      e.needs_no_gpu = true;
    } else {
      ADD_FAILURE() << file << ": unknown directive '" << word << "'";
    }
  }
  return e;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    if (entry.is_directory() && fs::exists(entry.path() / "command")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

// dtrain ARGS run in `dir` (stdin empty, 120 s at most), its stderr through `err_file`.
dtrain::testing::Output run_in(const fs::path& dir, const std::string& args, const fs::path& err_file) {
  const std::string cmd = "cd '" + dir.string() + "' && timeout 120 " + std::string(DTRAIN_BINARY) + " " +
                          args + " </dev/null 2>'" + err_file.string() + "'";
  dtrain::testing::Output o;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return o;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) o.out.append(buffer, n);
  const int status = pclose(pipe);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.err = read_file(err_file);
  return o;
}

class Corpus : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // The command runs in parent_/work, so that a write outside its out_dir shows in parent_.
    fs::create_directories(parent_ / "work");
  }

  dtrain::testing::ScratchDir parent_;
};

TEST_P(Corpus, Refuses) {
  const fs::path folder = kCorpus / GetParam();
  const auto expect = read_expectation(folder / "expect");
  ASSERT_NE(expect.exit_code, -1) << folder / "expect"
                                  << " has no 'exit N' line";
  ASSERT_NE(expect.exit_code, 0) << "a bad input ends with a non-zero status";
  ASSERT_FALSE(expect.fragments.empty()) << folder / "expect"
                                         << " has no 'stderr TEXT' line";
  if (expect.needs_no_gpu && torch::cuda::is_available()) GTEST_SKIP() << "this LibTorch sees a GPU";

  auto command = lines_of(read_file(folder / "command")).at(0);
  command = replace_all(command, "{case}", folder.string());
  command = replace_all(command, "{corpus}", kCorpus.string());
  const fs::path work = parent_ / "work";
  const auto out = run_in(work, command, parent_ / "stderr.txt");
  SCOPED_TRACE("dtrain " + command + "\nstderr:\n" + out.err);
  EXPECT_EQ(out.exit_code, expect.exit_code);

  // One line says what went wrong; every other line is dtrain's own log ("[rank r/N] ...",
  // "dtrain ...": the run folder, the launcher's log folder), never LibTorch's stack frames,
  // glog's lines, libjpeg's or libpng's warnings or "terminate called".
  std::vector<std::string> errors;
  for (const auto& line : lines_of(out.err)) {
    if (line.find("error:") != std::string::npos) {
      errors.push_back(line);
    } else {
      EXPECT_TRUE(line.rfind("[rank ", 0) == 0 || line.rfind("dtrain ", 0) == 0)
          << "a line that is not dtrain's: " << line;
    }
  }
  ASSERT_EQ(errors.size(), 1u) << "expected exactly one error line";
  for (const auto& fragment : expect.fragments) {
    EXPECT_NE(errors[0].find(fragment), std::string::npos) << "the error line lacks '" << fragment << "'";
  }
  for (const auto* noise : {"frame #", "Exception raised from", "terminate called"}) {
    EXPECT_EQ(errors[0].find(noise), std::string::npos) << "the error line holds '" << noise << "'";
  }
  for (const auto& path : expect.absent) {
    EXPECT_FALSE(fs::exists(work / path)) << (work / path) << " was made";
  }
  // Nothing beside the working folder: nothing written outside it.
  for (const auto& entry : fs::directory_iterator(parent_.path())) {
    const auto name = entry.path().filename().string();
    EXPECT_TRUE(name == "work" || name == "stderr.txt") << entry.path() << " was written outside the run";
  }
}

INSTANTIATE_TEST_SUITE_P(BadInputs, Corpus, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The corpus is read at run time: a folder that lost its cases would pass with none.
TEST(BadInputsCorpus, HoldsTheCases) {
  EXPECT_GE(case_names().size(), 18u);
}

}  // namespace
