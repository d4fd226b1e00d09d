// Logger: prefixing, timestamps and the file/console fan-out.
#include "dtrain/io/Logger.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <sstream>
#include <stdexcept>

namespace dtrain::io {
namespace {

std::string clock_time() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[16];
  std::strftime(text, sizeof(text), "%H:%M:%S", &local);
  return text;
}

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::Warning:
      return "warning: ";
    case LogLevel::Error:
      return "error: ";
    default:
      return "";
  }
}

}  // namespace

Logger::Logger(LoggerOptions options) : options_(std::move(options)) {
  if (!options_.file.empty()) {
    file_.open(options_.file, std::ios::app);
    if (!file_) {
      throw std::runtime_error("cannot open the log file " + options_.file.string() + ": " +
                               std::strerror(errno) + "; check that the run folder is writable");
    }
  }
}

std::shared_ptr<Logger> Logger::for_rank(const std::filesystem::path& log_file, int rank, int world_size,
                                         bool relay_status) {
  LoggerOptions options;
  options.rank = rank;
  options.world_size = world_size;
  options.file = log_file;
  if (rank == 0) options.console = Console::standard_error(relay_status);
  return std::make_shared<Logger>(std::move(options));
}

void Logger::log(LogLevel level, const std::string& message, bool to_console) {
  std::string prefix =
      "[rank " + std::to_string(options_.rank) + "/" + std::to_string(options_.world_size) + "] ";
  if (options_.timestamps) prefix += clock_time() + " ";
  prefix += level_tag(level);
  std::lock_guard<std::mutex> lock(mutex_);
  std::istringstream lines(message);
  std::string line;
  bool any = false;
  while (std::getline(lines, line) || !any) {
    any = true;
    const std::string full = prefix + line;
    if (file_.is_open()) file_ << full << '\n';
    if (options_.console && to_console) options_.console->write_line(full);
  }
  // Flushed per message: the log is what is left to read when a rank dies.
  if (file_.is_open()) file_.flush();
}

}  // namespace dtrain::io
