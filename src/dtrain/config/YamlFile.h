// Reading YAML documents with errors that name the file and line; the entry point for every
// configuration file dtrain reads (run configs here, experiment files above).
#pragma once

#include <yaml-cpp/node/node.h>

#include <cstddef>
#include <string>

namespace dtrain::config {

// Note [What a configuration file may be]
// Every configuration file (run configs, experiment files) is read by load_yaml_file under one
// rule: at most kMaxConfigBytes, UTF-8 throughout, exactly one YAML document, and at least one
// setting (an empty file is almost always a mistake: without a file `dtrain train` already uses
// the defaults). Each refusal names the file and, where there is one, the line.
constexpr std::size_t kMaxConfigBytes = 1 << 20;

// Parses `path` under that rule. Throws ConfigError when the file cannot be read or breaks it.
YAML::Node load_yaml_file(const std::string& path);

// Parses text (UTF-8, one document; empty text gives a null node); `source` names it in errors.
YAML::Node parse_yaml(const std::string& text, const std::string& source);

// "file:line" for a node parsed by the functions above (line numbers from 1), or just `source`
// when the node carries no position (nodes built in code or by overrides).
std::string yaml_location(const std::string& source, const YAML::Node& node);

}  // namespace dtrain::config
