// YAML parsing with positions in every error.
#include "dtrain/config/YamlFile.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dtrain/config/ConfigError.h"

namespace dtrain::config {

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string where = e.mark.is_null() ? source : source + ":" + std::to_string(e.mark.line + 1);
    throw ConfigError(where, "", "invalid YAML: " + e.msg);
  }
}

YAML::Node load_yaml_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path, "",
                      std::string("cannot open the configuration file (") + std::strerror(errno) +
                          "); check the path, relative paths are taken from the working directory");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_yaml(text.str(), path);
}

std::string yaml_location(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

}  // namespace dtrain::config
