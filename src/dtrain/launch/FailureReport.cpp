// Failure reports, quoted once by the launcher: the tail of a log is its last tail_lines lines,
// as RankLog kept them.
#include "dtrain/launch/FailureReport.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "dtrain/launch/Spawn.h"

namespace dtrain::launch {
namespace {

std::string tail_of(const RankLog& log) {
  const auto lines = log.tail();
  if (lines.empty()) return fmt::format("(nothing in {})\n", log.path());
  std::string out = fmt::format("last {} lines of {}:\n", lines.size(), log.path());
  for (const auto& line : lines) out += "  " + line + "\n";
  return out;
}

}  // namespace

std::string rank_failure_report(int rank, pid_t pid, int status, const RankLog& log,
                                const std::string& error_file) {
  std::string report =
      fmt::format("dtrain launch: rank {} (pid {}) {}\n", rank, pid, describe_status(status));
  report += tail_of(log);
  const std::string error = read_error_file(error_file);
  if (!error.empty()) report += fmt::format("error file of rank {} ({}):\n{}\n", rank, error_file, error);
  return report;
}

std::string mpirun_failure_report(const MpirunAccount& account, pid_t mpirun_pid, int status,
                                  const std::vector<std::unique_ptr<RankLog>>& logs,
                                  const std::string& log_dir) {
  const auto& rank = account.failed_rank;
  const auto& nodes = account.rank_nodes;
  std::string who = "a rank";
  if (rank) {
    const auto node = nodes.find(*rank);
    who = node == nodes.end() ? fmt::format("rank {}", *rank)
                              : fmt::format("rank {} on {}", *rank, node->second);
  } else if (account.daemon_lost && nodes.count(0)) {
    // mpirun lost a daemon: one of the nodes other than rank 0's (mpirun's own, where it maps
    // first), each named with its ranks.
    std::map<std::string, std::vector<int>> others;
    for (const auto& [r, node] : nodes) {
      if (node != nodes.at(0)) others[node].push_back(r);
    }
    std::vector<std::string> parts;
    for (const auto& [node, ranks] : others)
      parts.push_back(fmt::format("ranks {} on {}", fmt::join(ranks, ", "), node));
    if (!parts.empty()) {
      who = fmt::format("a rank of another node than rank 0's ({}: mpirun lost its daemon there)",
                        fmt::join(parts, "; "));
    }
  }
  std::string report =
      fmt::format("dtrain launch: {} (mpirun pid {}) {}\n", who, mpirun_pid, describe_status(status));
  if (rank && *rank >= 0 && *rank < static_cast<int>(logs.size())) {
    report += tail_of(*logs[*rank]);
  } else {
    report += fmt::format("mpirun did not say which rank; every rank's log is in {}\n", log_dir);
  }
  return report;
}

std::string read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  if (text.empty()) return {};
  const auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("message")) return text.substr(0, 4000);
  const auto& message = json["message"];
  if (message.is_string()) return message.get<std::string>();
  if (!message.is_object()) return message.dump();
  std::string out = message.contains("message") && message["message"].is_string()
                        ? message["message"].get<std::string>()
                        : message.dump();
  if (message.contains("extraInfo") && message["extraInfo"].is_object()) {
    const auto& extra = message["extraInfo"];
    if (extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      out += "\n" + extra["py_callstack"].get<std::string>();
    }
  }
  return out;
}

}  // namespace dtrain::launch
