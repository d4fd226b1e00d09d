// Reading DeepSpeed's hostfile and Horovod's -H list. DeepSpeed's runner (launcher/runner.py,
// _parse_hostfile) matches `^(\S+)\s+slots=(\d+)` and names no line in its error; here every
// error names the file and line, a bare host is one slot as in OpenMPI's hostfile, and a host
// listed twice is refused rather than merged.
#include "dtrain/launch/Hostfile.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace dtrain::launch {
namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r") - begin + 1);
}

// A slot count: a whole number >= 1; false for anything else.
bool parse_slots(const std::string& text, int& slots) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  slots = std::stoi(text);
  return slots >= 1;
}

void add_host(std::vector<Host>& hosts, std::map<std::string, std::string>& seen, Host host) {
  const auto [it, fresh] = seen.emplace(host.name, host.origin);
  if (!fresh) {
    throw std::invalid_argument(
        fmt::format("{}: host '{}' is listed twice (first at {}); give it once with "
                    "all its slots",
                    host.origin, host.name, it->second));
  }
  hosts.push_back(std::move(host));
}

}  // namespace

std::vector<Host> parse_hostfile(const std::string& text, const std::string& source) {
  std::vector<Host> hosts;
  std::map<std::string, std::string> seen;
  std::istringstream lines(text);
  int number = 0;
  for (std::string raw; std::getline(lines, raw);) {
    ++number;
    const std::string line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", source, number);
    auto malformed = [&](const std::string& what) {
      return std::invalid_argument(
          fmt::format("{}: {}; expected 'HOST slots=N' (N >= 1), found '{}'", where, what, trim(raw)));
    };
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    Host host{fields[0], 1, where};
    if (fields.size() > 2) throw malformed(fmt::format("unexpected '{}' after the slots", fields[2]));
    if (fields.size() == 2) {
      if (fields[1].rfind("slots=", 0) != 0) throw malformed(fmt::format("'{}' is not slots=N", fields[1]));
      if (!parse_slots(fields[1].substr(6), host.slots)) {
        throw malformed(fmt::format("slots must be a whole number >= 1, not '{}'", fields[1].substr(6)));
      }
    }
    if (host.name.find('=') != std::string::npos)
      throw malformed("the line starts with an option, not a host");
    add_host(hosts, seen, std::move(host));
  }
  if (hosts.empty()) {
    throw std::invalid_argument(fmt::format(
        "{}: no hosts (every line is blank or a comment); expected lines 'HOST slots=N'", source));
  }
  return hosts;
}

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::invalid_argument(fmt::format("--hostfile: cannot read '{}': {}", path, std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

std::vector<Host> parse_host_list(const std::string& list) {
  std::vector<Host> hosts;
  std::map<std::string, std::string> seen;
  std::istringstream items(list);
  int number = 0;
  for (std::string item; std::getline(items, item, ',');) {
    ++number;
    const std::string where = fmt::format("-H item {}", number);
    Host host{trim(item), 1, where};
    const auto colon = host.name.rfind(':');
    if (colon != std::string::npos) {
      const std::string slots = host.name.substr(colon + 1);
      host.name = host.name.substr(0, colon);
      if (!parse_slots(slots, host.slots)) {
        throw std::invalid_argument(fmt::format(
            "{}: slots must be a whole number >= 1, found '{}'; expected HOST[:SLOTS],... e.g. -H a:2,b:2",
            where, trim(item)));
      }
    }
    if (host.name.empty() || host.name.find_first_of(" \t") != std::string::npos) {
      throw std::invalid_argument(
          fmt::format("{}: expected a host name, found '{}'; expected HOST[:SLOTS],... e.g. -H a:2,b:2",
                      where, trim(item)));
    }
    add_host(hosts, seen, std::move(host));
  }
  if (hosts.empty()) throw std::invalid_argument("-H: no hosts; expected HOST[:SLOTS],... e.g. -H a:2,b:2");
  return hosts;
}

}  // namespace dtrain::launch
