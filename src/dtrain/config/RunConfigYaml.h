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

// What load_grid_run_config did with the keys of model.* that only some models read: the dotted
// keys it took out (this run's model does not read them) and those it kept.
struct GridModelKeys {
  std::vector<std::string> left_out, kept;
};
// As load_run_config, for one run of an experiment whose runs differ in model.name under shared
// model keys (dad.yaml's sweep of mlp and vit with model.hidden and model.patch): a key of model.*
// that this run's model does not read is taken out before the document is read, instead of
// refused, and named in `keys`. The experiment refuses a key that no run's model reads.
RunConfig load_grid_run_config(const std::string& path, const std::vector<std::string>& overrides,
                               GridModelKeys& keys);
// The same from YAML text (a sweep without a base file: `dtrain bench throughput`'s points).
RunConfig parse_grid_run_config(const std::string& yaml_text, const std::string& source,
                                const std::vector<std::string>& overrides, GridModelKeys& keys);
// What both do to the document before reading it.
void leave_out_unread_model_keys(YAML::Node& root, GridModelKeys& keys);

// A configuration made in code: throws ConfigError (naming `where`) for a key of model.* that the
// chosen model does not read and that holds other than its default, as reading it would refuse it;
// to_yaml leaves such keys out.
void check_model_keys_read(const RunConfig& config, const std::string& where);

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
