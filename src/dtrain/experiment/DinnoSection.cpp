// DinnoSection: the key-by-key reader of DiNNO's experiment file, with file:line in every error.
#include "dtrain/experiment/DinnoSection.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/ValueText.h"
#include "dtrain/config/YamlFile.h"

namespace dtrain::experiment {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

DinnoSection::DinnoSection(std::string source, YAML::Node node, std::string path,
                           std::vector<std::string> keys)
    : source_(std::move(source)), node_(std::move(node)), path_(std::move(path)), keys_(std::move(keys)) {
  if (!node_.IsMap()) reject_node(node_, path_, "expected a mapping of " + config::detail::join(keys_));
  // Unknown keys first: a misspelt key would otherwise show as the missing one it stands for.
  if (keys_.empty()) return;  // a mapping of names the caller reads (problem_configs)
  const YAML::Node& mapping = node_;
  for (const auto& entry : mapping) {
    const auto key = config::key_text(source_, entry.first, path_);
    if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) continue;
    const auto near = config::detail::closest(key, keys_);
    reject_node(entry.first, dotted(key),
                "unknown key; " + (path_.empty() ? std::string("the file") : path_) + " may hold " +
                    config::detail::join(keys_) + (near.empty() ? "" : " (did you mean " + near + "?)"));
  }
}

bool DinnoSection::has(const std::string& key) const {
  return node_[key].IsDefined() && !node_[key].IsNull();
}

YAML::Node DinnoSection::required(const std::string& key) {
  taken_.insert(key);
  if (!has(key)) {
    reject_node(node_, dotted(key),
                "missing; " + path_ + " needs it (it may hold " + config::detail::join(keys_) + ")");
  }
  const YAML::Node& node = node_;
  return node[key];
}

std::string DinnoSection::scalar(const std::string& key, const char* expected) {
  const auto value = required(key);
  if (!value.IsScalar())
    reject_node(value, dotted(key),
                std::string("expected ") + expected + ", found a " + (value.IsMap() ? "mapping" : "list"));
  return value.Scalar();
}

std::string DinnoSection::text(const std::string& key) {
  return scalar(key, "a string");
}

std::string DinnoSection::number(const std::string& key) {
  const auto s = scalar(key, "a positive number");
  const auto x = config::detail::parse_double(s);
  if (!x || *x <= 0) reject(key, "expected a positive number, found \"" + s + "\"");
  return s;
}

std::string DinnoSection::fraction(const std::string& key) {
  const auto s = scalar(key, "a number in [0, 1]");
  const auto x = config::detail::parse_double(s);
  if (!x || *x < 0 || *x > 1) reject(key, "expected a number in [0, 1], found \"" + s + "\"");
  return s;
}

std::int64_t DinnoSection::count(const std::string& key) {
  const auto s = scalar(key, "a positive integer");
  const auto n = config::detail::parse_int(s);
  if (!n || *n < 1) reject(key, "expected a positive integer, found \"" + s + "\"");
  return *n;
}

bool DinnoSection::boolean(const std::string& key) {
  const auto s = scalar(key, "true or false");
  const auto b = config::detail::parse_bool(s);
  if (!b) reject(key, "expected true or false, found \"" + s + "\"");
  return *b;
}

std::string DinnoSection::choice(const std::string& key, const std::vector<std::string>& allowed) {
  const auto s = scalar(key, "a string");
  for (const auto& a : allowed) {
    if (lower(a) == lower(s)) return a;
  }
  reject(key, "expected one of " + config::detail::join(allowed) + ", found \"" + s + "\"");
}

DinnoSection DinnoSection::section(const std::string& key, std::vector<std::string> keys) {
  return DinnoSection(source_, required(key), dotted(key), std::move(keys));
}

void DinnoSection::finish() const {
  const YAML::Node& node = node_;
  for (const auto& entry : node) {
    const auto key = config::key_text(source_, entry.first, path_);
    if (!taken_.count(key))
      reject_node(entry.first, dotted(key), "not used with the other settings given here; remove it");
  }
}

void DinnoSection::reject(const std::string& key, const std::string& message) const {
  reject_node(node_[key].IsDefined() ? node_[key] : node_, dotted(key), message);
}

void DinnoSection::reject_node(const YAML::Node& at, const std::string& key,
                               const std::string& message) const {
  throw config::ConfigError(config::yaml_location(source_, at), key, key + ": " + message);
}

bool is_dinno_form(const YAML::Node& root) {
  return root.IsMap() && (root["experiment"].IsDefined() || root["problem_configs"].IsDefined());
}

}  // namespace dtrain::experiment
