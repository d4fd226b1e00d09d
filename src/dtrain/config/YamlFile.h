// Reading YAML documents with errors that name the file and line; the entry point for every
// configuration file dtrain reads (run configs here, experiment files above).
#pragma once

#include <yaml-cpp/node/node.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::config {

// Note [What a configuration file may be]
// Every configuration file (run configs, experiment files) is read by load_yaml_file under one
// rule: at most kMaxConfigBytes, UTF-8 throughout, exactly one YAML document, and at least one
// setting (an empty file is almost always a mistake: without a file `dtrain train` already uses
// the defaults). Each refusal names the file and, where there is one, the line.
constexpr std::size_t kMaxConfigBytes = 1 << 20;

// Note [YAML bombs]
// YAML's anchors and aliases let a small file stand for a huge one: ten levels of ten aliases each
// ("billion laughs") are 10^10 values. yaml-cpp keeps an alias as a shared node, but anything that
// walks the document (the reader, the checks here, writing config.yaml) walks every path, and ran
// for ever. So the parser's events are counted before the document is loaded: the values it holds
// with every alias expanded (at most kMaxExpandedNodes; a full run configuration has about 150)
// and how deep it nests (at most kMaxYamlDepth; yaml-cpp recurses once per level and gave up on a
// few thousand levels with "bad file", naming nothing). Each refusal names the file and line.
constexpr std::uint64_t kMaxExpandedNodes = 100000;
constexpr std::size_t kMaxYamlDepth = 64;

// Parses `path` under that rule. Throws ConfigError when the file cannot be read or breaks it.
YAML::Node load_yaml_file(const std::string& path);

// Parses text (UTF-8, one document; empty text gives a null node); `source` names it in errors.
YAML::Node parse_yaml(const std::string& text, const std::string& source);

// The text of a mapping's key. A key that is not a plain value (a list or a mapping written as a
// key, which yaml-cpp would report as "bad conversion" naming neither file nor key) is refused
// with the file, line and `within`, the dotted path of the mapping ("" for the top level).
std::string key_text(const std::string& source, const YAML::Node& key, const std::string& within);

// "file:line" for a node parsed by the functions above (line numbers from 1), or just `source`
// when the node carries no position (nodes built in code or by overrides).
std::string yaml_location(const std::string& source, const YAML::Node& node);

}  // namespace dtrain::config
