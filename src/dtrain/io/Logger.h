// The per-rank log: every line starts "[rank r/N]" and goes to site_<rank>/log.txt; rank 0's lines
// are also shown on the console. The one place library code may print.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>

#include "dtrain/io/Console.h"

namespace dtrain::io {

enum class LogLevel { Info, Warning, Error };

struct LoggerOptions {
  int rank = 0;
  int world_size = 1;
  // "" = no file. Appended to, so a restarted run keeps its history.
  std::filesystem::path file;
  // Where console lines go; nullptr = none. Logger::for_rank sets it for rank 0 only.
  std::shared_ptr<Console> console;
  bool timestamps = true;  // "HH:MM:SS " after the rank prefix, in the file and on the console
};

class Logger {
 public:
  explicit Logger(LoggerOptions options);

  // The usual set-up: site_<rank>/log.txt, and stderr for rank 0 (Console::standard_error with
  // relay_status: whether a launcher asked for the status line to be relayed).
  static std::shared_ptr<Logger> for_rank(const std::filesystem::path& log_file, int rank, int world_size,
                                          bool relay_status);

  void info(const std::string& message) { log(LogLevel::Info, message); }
  void warning(const std::string& message) { log(LogLevel::Warning, message); }
  void error(const std::string& message) { log(LogLevel::Error, message); }
  // An info line for the log file only, never the console (train.log_evals: false keeps evaluation
  // lines off the screen but in the run's record).
  void info_file_only(const std::string& message) { log(LogLevel::Info, message, false); }
  // Each line of a multi-line message gets its own prefix; to_console false leaves the console out.
  void log(LogLevel level, const std::string& message, bool to_console = true);

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  const std::shared_ptr<Console>& console() const { return options_.console; }

 private:
  LoggerOptions options_;
  std::mutex mutex_;
  std::ofstream file_;
};

}  // namespace dtrain::io
