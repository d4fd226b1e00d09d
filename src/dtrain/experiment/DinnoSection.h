// One mapping of an experiment file in DiNNO's form (its experiment: / problem_configs:),
// read key by key: keys it may not hold are refused when it is opened, each value is checked as it
// is taken, and a key left untaken at finish() is one the settings around it do not use. Every error names
// file:line and the dotted key, as dtrain's own configs do.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dtrain/experiment/Experiment.h"

namespace dtrain::experiment {

class DinnoSection {
 public:
  // `path` is the section's dotted name ("experiment.graph"); `keys` the keys it may hold, in the
  // order an error lists them.
  DinnoSection(std::string source, YAML::Node node, std::string path, std::vector<std::string> keys);

  bool has(const std::string& key) const;
  // The value of a key that must be there; its absence is an error naming it.
  YAML::Node required(const std::string& key);
  // Scalars, checked and returned as the file spells them (numbers keep their text).
  std::string text(const std::string& key);
  std::string number(const std::string& key);    // a number > 0
  std::string fraction(const std::string& key);  // a number in [0, 1]
  std::int64_t count(const std::string& key);    // an integer >= 1
  bool boolean(const std::string& key);
  // One of `allowed` (case as written in `allowed`, compared without case); returns the allowed form.
  std::string choice(const std::string& key, const std::vector<std::string>& allowed);
  DinnoSection section(const std::string& key, std::vector<std::string> keys);

  // Throws for the first key of the mapping that was not taken (e.g. primal_lr_finish beside
  // primal_lr).
  void finish() const;

  [[noreturn]] void reject(const std::string& key, const std::string& message) const;
  [[noreturn]] void reject_node(const YAML::Node& at, const std::string& key,
                                const std::string& message) const;
  std::string dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const YAML::Node& node() const { return node_; }
  const std::string& source() const { return source_; }

 private:
  std::string scalar(const std::string& key, const char* expected);

  std::string source_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> keys_;
  std::set<std::string> taken_;
};

// Whether a file's root is in DiNNO's form: a mapping with experiment or problem_configs.
bool is_dinno_form(const YAML::Node& root);

// The runs of problem_configs, one per problem, each with its problem-specific overrides (after the
// experiment's common ones); the problems are recorded in form.problems. DinnoProblems.cpp.
std::vector<RunSpec> read_problem_configs(DinnoSection problems, DinnoForm& form);

}  // namespace dtrain::experiment
