// Per-rank log lines, the console sharing between log lines and the progress bar, and the
// progress bar's two modes (redrawn on a terminal, periodic plain lines elsewhere).
#include "dtrain/io/Logger.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "dtrain/io/ProgressBar.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

using dtrain::testing::read_file;

std::vector<std::string> lines_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Logger, EveryLineStartsWithTheRank) {
  dtrain::testing::ScratchDir dir;
  std::ostringstream screen;
  LoggerOptions options;
  options.rank = 2;
  options.world_size = 4;
  options.file = dir.path() / "log.txt";
  options.console = std::make_shared<Console>(screen, false);
  options.timestamps = false;
  {
    Logger logger(options);
    logger.info("epoch 1 done");
    logger.warning("two\nlines");
  }
  const std::vector<std::string> expected{"[rank 2/4] epoch 1 done", "[rank 2/4] warning: two",
                                          "[rank 2/4] warning: lines"};
  EXPECT_EQ(lines_of(read_file(dir.path() / "log.txt")), expected);
  EXPECT_EQ(lines_of(screen.str()), expected);
}

// train.log_evals: false keeps evaluation lines in the run's log but off the console.
TEST(Logger, FileOnlyLinesStayOffTheConsole) {
  dtrain::testing::ScratchDir dir;
  std::ostringstream screen;
  LoggerOptions options;
  options.file = dir.path() / "log.txt";
  options.console = std::make_shared<Console>(screen, false);
  options.timestamps = false;
  {
    Logger logger(options);
    logger.info_file_only("eval at step 20: loss 0.5");
    logger.info("done");
  }
  EXPECT_EQ(lines_of(read_file(dir.path() / "log.txt")),
            (std::vector<std::string>{"[rank 0/1] eval at step 20: loss 0.5", "[rank 0/1] done"}));
  EXPECT_EQ(lines_of(screen.str()), (std::vector<std::string>{"[rank 0/1] done"}));
}

TEST(Logger, TimestampsAndNoConsoleForOtherRanks) {
  dtrain::testing::ScratchDir dir;
  const auto logger = Logger::for_rank(dir.path() / "log.txt", 1, 2, /*relay_status=*/false);
  EXPECT_EQ(logger->console(), nullptr);
  logger->error("boom");
  const auto lines = lines_of(read_file(dir.path() / "log.txt"));
  ASSERT_EQ(lines.size(), 1u);
  // "[rank 1/2] HH:MM:SS error: boom"
  EXPECT_EQ(lines[0].rfind("[rank 1/2] ", 0), 0u);
  EXPECT_EQ(lines[0].size(), std::string("[rank 1/2] 12:00:00 error: boom").size()) << lines[0];
  EXPECT_EQ(lines[0].substr(lines[0].size() - 11), "error: boom");
  EXPECT_NE(Logger::for_rank(dir.path() / "log0.txt", 0, 2, /*relay_status=*/false)->console(), nullptr);
}

// A clock the test moves by hand.
struct FakeClock {
  std::chrono::steady_clock::time_point t{};
  void advance(double seconds) {
    t += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(seconds));
  }
};

TEST(ProgressBar, PlainLinesWhenNotATerminal) {
  std::ostringstream screen;
  auto console = std::make_shared<Console>(screen, false);
  FakeClock clock;
  ProgressBarOptions options;
  options.total_steps = 100;
  options.plain_interval_s = 10.0;
  options.now = [&] { return clock.t; };
  ProgressBar bar(console, options);
  for (int step = 1; step <= 100; ++step) {
    clock.advance(0.5);  // 2 steps/s: a line every 20 steps
    bar.update(step, 1.0 / step);
  }
  bar.finish();
  const auto lines = lines_of(screen.str());
  ASSERT_EQ(lines.size(), 6u) << screen.str();  // 5 periodic lines + the final one
  EXPECT_NE(lines[0].find("20/100"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("2.0 steps/s"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("ETA 0:40"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("loss 0.0500"), std::string::npos) << lines[0];
  EXPECT_EQ(screen.str().find('\r'), std::string::npos);
  EXPECT_NE(lines.back().find("100/100"), std::string::npos);
}

TEST(ProgressBar, RedrawnLineOnATerminalWithLogLinesAbove) {
  std::ostringstream screen;
  auto console = std::make_shared<Console>(screen, true);
  FakeClock clock;
  ProgressBarOptions options;
  options.total_steps = 10;
  options.now = [&] { return clock.t; };
  LoggerOptions log_options;
  log_options.console = console;
  log_options.timestamps = false;
  Logger logger(log_options);
  ProgressBar bar(console, options);
  clock.advance(1.0);
  bar.update(5, 0.5);
  logger.info("evaluating");
  clock.advance(1.0);
  bar.update(10, 0.25);
  bar.finish();
  const std::string text = screen.str();
  // The log line erases the status line, prints, and redraws the status below it.
  const auto log_at = text.find("\r\033[K[rank 0/1] evaluating\n");
  ASSERT_NE(log_at, std::string::npos) << text;
  EXPECT_NE(text.find("5/10", log_at), std::string::npos);
  EXPECT_NE(text.find("10/10"), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
}

TEST(ProgressBar, RelayedThroughTheLauncherAsCarriageReturnLines) {
  // Under `dtrain launch` on a terminal: each status is a line "\r<status>" for the launcher to
  // draw, log lines are plain lines, and the end clears the status with an empty one.
  std::ostringstream screen;
  auto console = std::make_shared<Console>(screen, Console::Mode::Relay);
  EXPECT_TRUE(console->is_terminal());
  FakeClock clock;
  ProgressBarOptions options;
  options.total_steps = 10;
  options.now = [&] { return clock.t; };
  ProgressBar bar(console, options);
  clock.advance(1.0);
  bar.update(5, 0.5);
  console->write_line("evaluating");
  bar.finish();
  std::vector<std::string> lines;
  std::istringstream in(screen.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << screen.str();
  EXPECT_EQ(lines[0].rfind("\r", 0), 0u);
  EXPECT_NE(lines[0].find("5/10"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1], "evaluating");
  EXPECT_EQ(lines[2], "\r");                                        // cleared
  EXPECT_NE(lines[3].find("5/10"), std::string::npos) << lines[3];  // the last figures, as a line
  EXPECT_EQ(lines[3].find('\r'), std::string::npos);
  EXPECT_EQ(screen.str().find("\033"), std::string::npos);  // no terminal codes down the pipe
}

}  // namespace
}  // namespace dtrain::io
