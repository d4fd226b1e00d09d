// Dotted command-line overrides (`optim.lr=0.01 data.synthetic_shape=[3,32,32]`) applied to a YAML
// document before it is validated. The value is parsed as YAML, so scalars, flow sequences and flow
// mappings all work; the experiment layer uses the same helper to derive runs from a base file.
#pragma once

#include <yaml-cpp/node/node.h>

#include <string>
#include <vector>

namespace dtrain::config {

struct Override {
  std::string key;    // dotted path, e.g. "optim.scheduler.name"
  std::string value;  // the YAML text after '='
  std::string text;   // the override as the user wrote it, for error messages
  // Set by a command-line flag that stands for the key (`--lr 0.1` for optim.lr): `text` is the
  // flag as given, and errors name it as it is ("--lr fast: optim.lr: ...").
  bool flag = false;
  // `key=null` (also ~ or Null) or `~key`: the key is taken out of the document, so its default
  // applies again (a setting of the configuration file undone on the command line).
  bool remove = false;
};

// Where an error about `override_` happened, as errors name it: `override "optim.lr=fast"`, or a
// flag's text itself ("--lr fast").
std::string origin_of(const Override& override_);

// Splits "a.b.c=value" (or "~a.b.c", a removal); throws ConfigError when there is no '=' or the key
// is malformed.
Override parse_override(const std::string& text);

// Sets each override's key in `root` (a mapping; created when null), creating intermediate
// mappings as needed, or takes it out (Override::remove); later overrides win. A value that is a
// mapping replaces the whole section.
// Throws ConfigError naming the override when its value is not valid YAML or its path runs
// through a value that is not a mapping. Keys are not checked here: validation does that.
void apply_overrides(YAML::Node& root, const std::vector<Override>& overrides);
// Parses each "key=value" string.
std::vector<Override> parse_overrides(const std::vector<std::string>& texts);

// Note [Overrides and line numbers]: YAML::Clone drops line numbers, so apply_overrides works in
// place. To derive several runs from one base file, load the file once per run (load_yaml_file).

}  // namespace dtrain::config
