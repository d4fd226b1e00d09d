// RunConfig <-> YAML and JSON, all through the one description in Schema.cpp: the reader
// (YamlReader), the writers, the key list and the comparison below visit the same fields.
#include "dtrain/config/RunConfigYaml.h"

#include <c10/util/Exception.h>
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <variant>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/Schema.h"
#include "dtrain/config/ValueText.h"
#include "dtrain/config/YamlFile.h"
#include "dtrain/config/YamlReader.h"

namespace dtrain::config {
namespace {

// Writers only read; the description takes a mutable config because readers assign through it.
RunConfig& for_reading(const RunConfig& config) {
  return const_cast<RunConfig&>(config);
}

// Calls set(key, value) for every applicable option and opens/closes sections; T is the tree type.
class TreeWriter : public OptionVisitor {
 public:
  void integer(const char* key, int& value, IntRange, const char*) override { put(key, value); }
  void integer(const char* key, std::int64_t& value, IntRange, const char*) override { put(key, value); }
  void integer(const char* key, std::uint64_t& value, IntRange, const char*) override { put(key, value); }
  void boolean(const char* key, bool& value, const char*) override { put(key, value); }
  void choice(const char* key, std::string& value, const ChoiceSet&, const char*) override {
    put(key, value);
  }
  void enum_choice(const char* key, const EnumField& value, const char*) override { put(key, value.name()); }
  void text(const char* key, std::string& value, Text, const char*) override { put(key, value); }

 protected:
  virtual void put(const char* key, int value) = 0;
  virtual void put(const char* key, std::int64_t value) = 0;
  virtual void put(const char* key, std::uint64_t value) = 0;
  virtual void put(const char* key, bool value) = 0;
  virtual void put(const char* key, const std::string& value) = 0;
};

class YamlWriter final : public TreeWriter {
 public:
  YAML::Node root{YAML::NodeType::Map};

  // `every_key`: keys that do not apply are written too (to compare values, never to be read).
  explicit YamlWriter(bool every_key = false) : every_key_(every_key) { stack_.push_back(root); }

  void number(const char* key, double& value, Range, const char*) override {
    set(key, YAML::Node(detail::format_double(value)));
  }
  void int_list(const char* key, std::vector<int>& values, std::int64_t, bool, const char*) override {
    list(key, values);
  }
  void int_list(const char* key, std::vector<std::int64_t>& values, std::int64_t, bool,
                const char*) override {
    list(key, values);
  }
  void text_list(const char* key, std::vector<std::string>& values, const char*) override {
    list(key, values);
  }
  void inapplicable(const char* key, const char*) override {
    if (!every_key_) stack_.back().remove(key);
  }
  void section(const char* key, const std::function<void()>& body, const char* unused) override {
    if (unused) return;
    YAML::Node child(YAML::NodeType::Map);
    set(key, child);
    stack_.push_back(child);
    body();
    stack_.pop_back();
  }

 private:
  void put(const char* key, int value) override { set(key, YAML::Node(value)); }
  void put(const char* key, std::int64_t value) override { set(key, YAML::Node(value)); }
  void put(const char* key, std::uint64_t value) override { set(key, YAML::Node(value)); }
  void put(const char* key, bool value) override { set(key, YAML::Node(value)); }
  void put(const char* key, const std::string& value) override { set(key, YAML::Node(value)); }
  template <class T>
  void list(const char* key, const std::vector<T>& values) {
    YAML::Node node(YAML::NodeType::Sequence);
    for (const auto& v : values) node.push_back(v);
    node.SetStyle(YAML::EmitterStyle::Flow);
    set(key, node);
  }
  void set(const char* key, const YAML::Node& value) { stack_.back()[key] = value; }
  bool every_key_;
  std::vector<YAML::Node> stack_;
};

class JsonWriter final : public TreeWriter {
 public:
  nlohmann::json root = nlohmann::json::object();

  JsonWriter() { stack_.push_back(&root); }

  void number(const char* key, double& value, Range, const char*) override { (*stack_.back())[key] = value; }
  void int_list(const char* key, std::vector<int>& values, std::int64_t, bool, const char*) override {
    (*stack_.back())[key] = values;
  }
  void int_list(const char* key, std::vector<std::int64_t>& values, std::int64_t, bool,
                const char*) override {
    (*stack_.back())[key] = values;
  }
  void text_list(const char* key, std::vector<std::string>& values, const char*) override {
    (*stack_.back())[key] = values;
  }
  void inapplicable(const char* key, const char*) override { stack_.back()->erase(key); }
  void section(const char* key, const std::function<void()>& body, const char* unused) override {
    if (unused) return;
    nlohmann::json& child = (*stack_.back())[key] = nlohmann::json::object();
    stack_.push_back(&child);
    body();
    stack_.pop_back();
  }

 private:
  void put(const char* key, int value) override { (*stack_.back())[key] = value; }
  void put(const char* key, std::int64_t value) override { (*stack_.back())[key] = value; }
  void put(const char* key, std::uint64_t value) override { (*stack_.back())[key] = value; }
  void put(const char* key, bool value) override { (*stack_.back())[key] = value; }
  void put(const char* key, const std::string& value) override { (*stack_.back())[key] = value; }
  std::vector<nlohmann::json*> stack_;
};

// An enum option's value by its name; dereferenced as the pointers beside it are, for operator==.
struct EnumName {
  std::string name;
  const std::string& operator*() const { return name; }
};

using FieldPtr = std::variant<const int*, const std::int64_t*, const std::uint64_t*, const double*,
                              const bool*, const std::string*, const std::vector<int>*,
                              const std::vector<std::int64_t>*, const std::vector<std::string>*, EnumName>;

// Every field's address, or every dotted key, in description order; every section counts.
class FieldCollector final : public OptionVisitor {
 public:
  std::vector<FieldPtr> fields;
  std::vector<std::string> keys;

  void integer(const char* key, int& value, IntRange, const char*) override { add(key, &value); }
  void integer(const char* key, std::int64_t& value, IntRange, const char*) override { add(key, &value); }
  void integer(const char* key, std::uint64_t& value, IntRange, const char*) override { add(key, &value); }
  void number(const char* key, double& value, Range, const char*) override { add(key, &value); }
  void boolean(const char* key, bool& value, const char*) override { add(key, &value); }
  void choice(const char* key, std::string& value, const ChoiceSet&, const char*) override {
    add(key, &value);
  }
  void enum_choice(const char* key, const EnumField& value, const char*) override {
    keys.push_back(prefix_ + key);
    fields.emplace_back(EnumName{value.name()});
  }
  void text(const char* key, std::string& value, Text, const char*) override { add(key, &value); }
  void int_list(const char* key, std::vector<int>& value, std::int64_t, bool, const char*) override {
    add(key, &value);
  }
  void int_list(const char* key, std::vector<std::int64_t>& value, std::int64_t, bool, const char*) override {
    add(key, &value);
  }
  void text_list(const char* key, std::vector<std::string>& value, const char*) override { add(key, &value); }
  void section(const char* key, const std::function<void()>& body, const char*) override {
    keys.push_back(prefix_ + key);
    const auto saved = prefix_;
    prefix_ += std::string(key) + ".";
    body();
    prefix_ = saved;
  }

 private:
  template <class T>
  void add(const char* key, const T* value) {
    keys.push_back(prefix_ + key);
    fields.emplace_back(value);
  }
  std::string prefix_;
};

// Every option's dotted key, default and help, in description order; every section counts, so a
// strategy's options are listed whichever strategy is the default.
class HelpCollector final : public OptionVisitor {
 public:
  std::vector<KeyHelp> keys;

  void integer(const char* key, int& value, IntRange, const char* help) override { add(key, value, help); }
  void integer(const char* key, std::int64_t& value, IntRange, const char* help) override {
    add(key, value, help);
  }
  void integer(const char* key, std::uint64_t& value, IntRange, const char* help) override {
    add(key, value, help);
  }
  void number(const char* key, double& value, Range, const char* help) override {
    add(key, detail::format_double(value), help);
  }
  void boolean(const char* key, bool& value, const char* help) override { add(key, value, help); }
  void choice(const char* key, std::string& value, const ChoiceSet& allowed, const char* help) override {
    add(key, value, help);
    keys.back().allowed = allowed.list();
  }
  void enum_choice(const char* key, const EnumField& value, const char* help) override {
    add(key, value.name(), help);
    keys.back().allowed = value.allowed().list();
  }
  void text(const char* key, std::string& value, Text, const char* help) override { add(key, value, help); }
  void int_list(const char* key, std::vector<int>& value, std::int64_t, bool, const char* help) override {
    add(key, value, help);
  }
  void int_list(const char* key, std::vector<std::int64_t>& value, std::int64_t, bool,
                const char* help) override {
    add(key, value, help);
  }
  void text_list(const char* key, std::vector<std::string>& value, const char* help) override {
    add(key, value, help);
  }
  void section(const char* key, const std::function<void()>& body, const char*) override {
    const auto saved = prefix_;
    prefix_ += std::string(key) + ".";
    body();
    prefix_ = saved;
  }

 private:
  // The default as config.yaml writes it: `""` for an empty string, `[1, 28, 28]` for a list.
  template <class T>
  void add(const char* key, const T& value, const char* help) {
    YAML::Node node(value);
    if (node.IsSequence()) node.SetStyle(YAML::EmitterStyle::Flow);
    YAML::Emitter out;
    out << node;
    keys.push_back(KeyHelp{prefix_ + key, out.c_str(), help ? help : "", ""});
  }
  std::string prefix_;
};

const std::vector<std::string>& all_keys() {
  static const std::vector<std::string> keys = [] {
    FieldCollector collector;
    RunConfig defaults;
    describe_run(collector, defaults);
    return collector.keys;
  }();
  return keys;
}

}  // namespace

RunConfig run_config_from_yaml(const YAML::Node& root, const std::string& source,
                               const std::vector<Override>& applied_overrides) {
  for (const auto& removal : applied_overrides) {
    if (!removal.remove) continue;
    const auto& keys = all_keys();
    const bool known = std::any_of(keys.begin(), keys.end(), [&](const std::string& key) {
      return key == removal.key || key.rfind(removal.key + ".", 0) == 0;
    });
    if (!known) {
      throw ConfigError(origin_of(removal), removal.key,
                        removal.key + ": no such key to remove; `dtrain train --help` lists the keys");
    }
  }
  RunConfig config;
  YamlReader reader(root, source, applied_overrides, all_keys());
  describe_run(reader, config);
  reader.finish("name, out_dir, run_folder, nproc, data, model, optim, parallel, train");
  return config;
}

RunConfig parse_run_config(const std::string& yaml_text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  return run_config_from_text(yaml_text, source, parse_overrides(overrides));
}

RunConfig run_config_from_text(const std::string& yaml_text, const std::string& source,
                               const std::vector<Override>& overrides) {
  YAML::Node root = parse_yaml(yaml_text, source);
  apply_overrides(root, overrides);
  return run_config_from_yaml(root, source, overrides);
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides) {
  return run_config_from_file(path, parse_overrides(overrides));
}

void leave_out_unread_model_keys(YAML::Node& root, GridModelKeys& keys) {
  const YAML::Node& document = root;
  if (!document.IsMap() || !document["model"] || !document["model"].IsMap()) return;
  YAML::Node model = root["model"];
  const YAML::Node& section = model;
  std::string name = ModelConfig{}.name;
  if (section["name"] && section["name"].IsScalar()) name = section["name"].as<std::string>();
  for (const auto& key : model_specific_keys()) {
    if (!section[key]) continue;
    if (model_key_unused(name, key).empty()) {
      keys.kept.push_back("model." + key);
    } else {
      model.remove(key);
      keys.left_out.push_back("model." + key);
    }
  }
}

RunConfig load_grid_run_config(const std::string& path, const std::vector<std::string>& overrides,
                               GridModelKeys& keys) {
  const auto parsed = parse_overrides(overrides);
  YAML::Node root = load_yaml_file(path);
  apply_overrides(root, parsed);
  leave_out_unread_model_keys(root, keys);
  return run_config_from_yaml(root, path, parsed);
}

RunConfig parse_grid_run_config(const std::string& yaml_text, const std::string& source,
                                const std::vector<std::string>& overrides, GridModelKeys& keys) {
  const auto parsed = parse_overrides(overrides);
  YAML::Node root = parse_yaml(yaml_text, source);
  apply_overrides(root, parsed);
  leave_out_unread_model_keys(root, keys);
  return run_config_from_yaml(root, source, parsed);
}

RunConfig run_config_from_file(const std::string& path, const std::vector<Override>& overrides) {
  YAML::Node root = load_yaml_file(path);
  apply_overrides(root, overrides);
  return run_config_from_yaml(root, path, overrides);
}

void check_model_keys_read(const RunConfig& config, const std::string& where) {
  YamlWriter given(/*every_key=*/true), defaults(/*every_key=*/true);
  describe_run(given, for_reading(config));
  describe_run(defaults, for_reading(RunConfig{}));
  for (const auto& key : model_specific_keys()) {
    const auto why = model_key_unused(config.model.name, key);
    if (why.empty()) continue;
    if (YAML::Dump(given.root["model"][key]) != YAML::Dump(defaults.root["model"][key]))
      throw ConfigError(where, "model." + key, "model." + key + ": " + why);
  }
}

YAML::Node to_yaml_node(const RunConfig& config) {
  YamlWriter writer;
  describe_run(writer, for_reading(config));
  return writer.root;
}

std::string to_yaml(const RunConfig& config) {
  YAML::Emitter out;
  out << to_yaml_node(config);
  return std::string(out.c_str()) + "\n";
}

nlohmann::json to_json(const RunConfig& config) {
  JsonWriter writer;
  describe_run(writer, for_reading(config));
  return writer.root;
}

std::vector<std::string> config_keys() {
  return all_keys();
}

std::vector<KeyHelp> config_key_help() {
  HelpCollector collector;
  RunConfig defaults;
  describe_run(collector, defaults);
  return collector.keys;
}

bool operator==(const RunConfig& a, const RunConfig& b) {
  FieldCollector fa, fb;
  describe_run(fa, for_reading(a));
  describe_run(fb, for_reading(b));
  if (fa.keys != fb.keys) return false;  // e.g. another strategy's section count
  for (std::size_t i = 0; i < fa.fields.size(); ++i) {
    const bool same = std::visit(
        [&](auto pa) {
          using P = decltype(pa);
          return *pa == *std::get<P>(fb.fields[i]);
        },
        fa.fields[i]);
    if (!same) return false;
  }
  return true;
}

}  // namespace dtrain::config
