// Reading YAML documents with errors that name the file and line; the entry point for every
// configuration file dtrain reads (run configs here, experiment files above).
#pragma once

#include <yaml-cpp/node/node.h>

#include <string>

namespace dtrain::config {

// Parses `path`; an empty file gives a null node. Throws ConfigError when the file cannot be read
// or is not valid YAML.
YAML::Node load_yaml_file(const std::string& path);

// The same from text; `source` names it in errors.
YAML::Node parse_yaml(const std::string& text, const std::string& source);

// "file:line" for a node parsed by the functions above (line numbers from 1), or just `source`
// when the node carries no position (nodes built in code or by overrides).
std::string yaml_location(const std::string& source, const YAML::Node& node);

}  // namespace dtrain::config
