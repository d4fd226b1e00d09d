// RunConfig <-> YAML: loading with validation (every error names file:line, the dotted key and
// what is allowed), dotted overrides, and serialisation of the effective configuration such that
// loading it back gives an identical RunConfig.
#pragma once

#include <yaml-cpp/node/node.h>
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "dtrain/config/Overrides.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::config {

// Reads `path`, applies `overrides` ("key=value" strings) and validates. Keys left out keep the
// defaults of RunConfig.h. Throws ConfigError.
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The same from YAML text; `source` names it in errors (a file name or "<string>").
RunConfig parse_run_config(const std::string& yaml_text, const std::string& source = "<string>",
                           const std::vector<std::string>& overrides = {});

// The same two with the overrides parsed already: command-line flags that stand for keys among
// them (Override::flag), applied in order, later ones winning.
RunConfig run_config_from_file(const std::string& path, const std::vector<Override>& overrides);
RunConfig run_config_from_text(const std::string& yaml_text, const std::string& source,
                               const std::vector<Override>& overrides);

// Validates an already parsed document. `source` names the file its line numbers refer to;
// values under an override's key are reported against that override instead of a line.
RunConfig run_config_from_yaml(const YAML::Node& root, const std::string& source,
                               const std::vector<Override>& applied_overrides = {});

// Every field of `config`, sections in the order of RunConfig.h.
std::string to_yaml(const RunConfig& config);
YAML::Node to_yaml_node(const RunConfig& config);
// The same tree as JSON, for results.json and checkpoint metadata.
nlohmann::json to_json(const RunConfig& config);

// Every dotted key of the schema ("data.dataset", ..., "parallel.data_parallel.bucket_mb"), for
// --help and for suggestions.
std::vector<std::string> config_keys();

// One option as `dtrain train --help` lists it.
struct KeyHelp {
  std::string key;           // "train.max_steps"
  std::string default_text;  // the default as config.yaml writes it: 0, fp32, "", [1, 28, 28]
  std::string help;          // one line
  std::string allowed;       // a choice's names, "pad, drop, join"; empty for other options
};
// Every option of the schema (the keys that hold a value, not the sections), with its default and
// help, in the order of config_keys(): the same description the reader validates against.
std::vector<KeyHelp> config_key_help();

bool operator==(const RunConfig& a, const RunConfig& b);
inline bool operator!=(const RunConfig& a, const RunConfig& b) {
  return !(a == b);
}

}  // namespace dtrain::config
