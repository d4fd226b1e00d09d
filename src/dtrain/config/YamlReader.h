// Reads options from a YAML tree into the structs their description visits, validating as it
// goes: every error names where the value came from (file:line, or the override that set it), the
// dotted key, what is allowed and, for a likely typo, the nearest allowed word or key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "dtrain/config/Options.h"
#include "dtrain/config/Overrides.h"

namespace dtrain::config {

class YamlReader final : public OptionVisitor {
 public:
  // `all_keys`: every dotted key of the schema, for suggesting the right key in the wrong section.
  YamlReader(const YAML::Node& root, std::string source, const std::vector<Override>& overrides,
             std::vector<std::string> all_keys);

  void integer(const char* key, int& value, IntRange range, const char*) override {
    read_integer(key, value, range);
  }
  void integer(const char* key, std::int64_t& value, IntRange range, const char*) override {
    read_integer(key, value, range);
  }
  void integer(const char* key, std::uint64_t& value, IntRange range, const char*) override {
    read_integer(key, value, range);
  }
  void number(const char* key, double& value, Range range, const char*) override;
  void boolean(const char* key, bool& value, const char*) override;
  void choice(const char* key, std::string& value, const ChoiceSet& allowed, const char*) override;
  void enum_choice(const char* key, const EnumField& value, const char* help) override;
  void text(const char* key, std::string& value, Text rule, const char*) override;
  void int_list(const char* key, std::vector<int>& value, std::int64_t min, bool allow_empty,
                const char*) override {
    read_int_list(key, value, min, allow_empty);
  }
  void int_list(const char* key, std::vector<std::int64_t>& value, std::int64_t min, bool allow_empty,
                const char*) override {
    read_int_list(key, value, min, allow_empty);
  }
  void text_list(const char* key, std::vector<std::string>& value, const char*) override;
  void section(const char* key, const std::function<void()>& body, const char* unused) override;
  void inapplicable(const char* key, const char* why) override;

  // Checks the root's own keys; sections check theirs when they close. `top_keys` lists them for
  // the message when the document is not a mapping at all.
  void finish(const std::string& top_keys);

 private:
  struct Frame {
    YAML::Node node;  // null when the section is absent
    std::string path;
    std::set<std::string> known{};
  };

  template <class T>
  void read_integer(const char* key, T& out, const IntRange& range);
  template <class T>
  void read_int_list(const char* key, std::vector<T>& out, std::int64_t min, bool allow_empty);

  std::string path(const char* key) const;
  std::optional<YAML::Node> value(const char* key);
  std::optional<YAML::Node> key_node(const char* key) const;
  std::string where(const std::string& key, const YAML::Node& node) const;
  [[noreturn]] void fail(const YAML::Node& node, const char* key, const std::string& problem) const;
  void reject_unknown_keys() const;
  std::string suggest_key(const Frame& frame, const std::string& key) const;

  std::string source_;
  const std::vector<Override>& overrides_;
  std::vector<std::string> all_keys_;
  std::vector<Frame> frames_;
};

}  // namespace dtrain::config
