// See YamlReader.h.
#include "dtrain/config/YamlReader.h"

#include <algorithm>
#include <limits>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/ValueText.h"
#include "dtrain/config/YamlFile.h"

namespace dtrain::config {
namespace {

using detail::closest;
using detail::describe;
using detail::join;

// A quoted scalar ('64', "true") is a string in YAML, never a number or a boolean.
bool quoted(const YAML::Node& node) {
  return node.IsScalar() && node.Tag() == "!";
}

// The scalar a number or boolean is read from; nothing for a quoted string or a collection.
std::optional<std::string> plain_scalar(const YAML::Node& node) {
  if (!node.IsScalar() || quoted(node)) return std::nullopt;
  return node.Scalar();
}

std::string found(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return quoted(node) ? "the quoted string \"" + node.Scalar() + "\"" : "\"" + node.Scalar() + "\"";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

}  // namespace

YamlReader::YamlReader(const YAML::Node& root, std::string source, const std::vector<Override>& overrides,
                       std::vector<std::string> all_keys)
    : source_(std::move(source)), overrides_(overrides), all_keys_(std::move(all_keys)) {
  frames_.push_back(Frame{root, ""});
}

template <class T>
void YamlReader::read_integer(const char* key, T& out, const IntRange& range) {
  const auto node = value(key);
  if (!node) return;
  const auto scalar = plain_scalar(*node);
  const auto parsed = scalar ? detail::parse_int(*scalar) : std::nullopt;
  IntRange allowed = range;
  allowed.min = std::max<std::int64_t>(allowed.min, std::numeric_limits<T>::min());
  if (static_cast<std::uint64_t>(std::numeric_limits<T>::max()) <
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    allowed.max = std::min<std::int64_t>(allowed.max, std::numeric_limits<T>::max());
  }
  const std::int64_t v = parsed.value_or(0);
  if (!parsed || v < allowed.min || v > allowed.max) {
    // The type's own limits are named only when they are what the value broke.
    const bool type_limit = parsed && v >= range.min && v <= range.max;
    fail(*node, key, "expected " + describe(type_limit ? allowed : range) + ", found " + found(*node));
  }
  out = static_cast<T>(v);
}

void YamlReader::number(const char* key, double& out, Range range, const char*) {
  const auto node = value(key);
  if (!node) return;
  const auto scalar = plain_scalar(*node);
  const auto parsed = scalar ? detail::parse_double(*scalar) : std::nullopt;
  if (!parsed || !detail::in_range(*parsed, range)) {
    fail(*node, key, "expected " + describe(range) + ", found " + found(*node));
  }
  out = *parsed;
}

void YamlReader::boolean(const char* key, bool& out, const char*) {
  const auto node = value(key);
  if (!node) return;
  const auto scalar = plain_scalar(*node);
  const auto parsed = scalar ? detail::parse_bool(*scalar) : std::nullopt;
  if (!parsed) fail(*node, key, "expected true or false, found " + found(*node));
  out = *parsed;
}

void YamlReader::choice(const char* key, std::string& out, const ChoiceSet& allowed, const char*) {
  const auto node = value(key);
  if (!node) return;
  const std::string text = node->IsScalar() ? node->Scalar() : "";
  const auto canonical = node->IsScalar() ? allowed.resolve(text) : std::nullopt;
  if (!canonical) {
    std::string message = "expected one of " + allowed.list() + "; found " + found(*node);
    const auto suggestion = closest(text, allowed.names());
    if (node->IsScalar() && !suggestion.empty()) message += "; did you mean " + suggestion + "?";
    fail(*node, key, message);
  }
  out = *canonical;
}

// The text is read and checked as any choice; only its canonical name reaches the enum.
void YamlReader::enum_choice(const char* key, const EnumField& value, const char* help) {
  std::string name = value.name();
  choice(key, name, value.allowed(), help);
  value.set(name);
}

void YamlReader::text(const char* key, std::string& out, Text rule, const char*) {
  const auto node = value(key);
  if (!node) return;
  if (!node->IsScalar() && !node->IsNull()) fail(*node, key, "expected a string, found " + found(*node));
  const std::string text = node->IsScalar() ? node->Scalar() : "";
  if (rule != Text::Any && text.empty()) fail(*node, key, "expected a non-empty string, found nothing");
  const bool control = std::any_of(text.begin(), text.end(),
                                   [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  if (rule == Text::Name && (text.find('/') != std::string::npos || text == "." || text == ".." || control)) {
    fail(*node, key,
         "expected a name without '/' or control characters, not . or .. (it names the run folder), found " +
             found(*node));
  }
  out = text;
}

template <class T>
void YamlReader::read_int_list(const char* key, std::vector<T>& out, std::int64_t min, bool allow_empty) {
  const auto node = value(key);
  if (!node) return;
  const std::string expected = std::string("expected a sequence of ") + (allow_empty ? "" : "one or more ") +
                               "integers >= " + std::to_string(min) + ", e.g. [3, 32, 32]; found ";
  if (!node->IsSequence() || (!allow_empty && node->size() == 0)) fail(*node, key, expected + found(*node));
  std::vector<T> values;
  for (const auto& item : *node) {
    const auto scalar = plain_scalar(item);
    const auto parsed = scalar ? detail::parse_int(*scalar) : std::nullopt;
    if (!parsed || *parsed < min || *parsed > std::numeric_limits<T>::max()) {
      fail(item, key, expected + found(item) + " in the sequence");
    }
    values.push_back(static_cast<T>(*parsed));
  }
  out = std::move(values);
}

void YamlReader::text_list(const char* key, std::vector<std::string>& out, const char*) {
  const auto node = value(key);
  if (!node) return;
  const std::string expected = "expected a sequence of non-empty strings, e.g. [\"layers.0.*\"]; found ";
  if (!node->IsSequence()) fail(*node, key, expected + found(*node));
  std::vector<std::string> values;
  for (const auto& item : *node) {
    if (!item.IsScalar() || item.Scalar().empty())
      fail(item, key, expected + found(item) + " in the sequence");
    values.push_back(item.Scalar());
  }
  out = std::move(values);
}

void YamlReader::section(const char* key, const std::function<void()>& body, const char* unused) {
  const auto node = value(key);
  YAML::Node section_node;
  if (node) {
    // Pointed at by its key's line: the section's own node starts at its first entry.
    if (unused && !node->IsNull()) fail(key_node(key).value_or(*node), key, unused);
    if (!node->IsMap() && !node->IsNull()) {
      fail(*node, key, "expected a section of indented key: value lines, found " + found(*node));
    }
    section_node = *node;
  }
  frames_.push_back(Frame{section_node, path(key)});
  body();
  reject_unknown_keys();
  frames_.pop_back();
}

void YamlReader::inapplicable(const char* key, const char* why) {
  const auto node = value(key);
  if (node && !node->IsNull()) fail(key_node(key).value_or(*node), key, why);
}

void YamlReader::finish(const std::string& top_keys) {
  const YAML::Node& root = frames_.back().node;
  if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
    throw ConfigError(
        yaml_location(source_, root), "",
        "expected a mapping of keys (" + top_keys + ") at the top of the document, found " + found(root));
  }
  reject_unknown_keys();
}

std::string YamlReader::path(const char* key) const {
  const auto& prefix = frames_.back().path;
  return prefix.empty() ? std::string(key) : prefix + "." + key;
}

// The value under `key` in the current section, or nullopt when absent (the default stays).
std::optional<YAML::Node> YamlReader::value(const char* key) {
  Frame& frame = frames_.back();
  frame.known.insert(key);
  if (!frame.node.IsDefined() || !frame.node.IsMap()) return std::nullopt;
  const YAML::Node& section = frame.node;
  const YAML::Node child = section[key];
  if (!child.IsDefined()) return std::nullopt;
  return child;
}

// The node of `key` itself (not its value) in the current section, for errors about the whole entry.
std::optional<YAML::Node> YamlReader::key_node(const char* key) const {
  const YAML::Node& section = frames_.back().node;
  if (!section.IsDefined() || !section.IsMap()) return std::nullopt;
  for (const auto& entry : section) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return entry.first;
  }
  return std::nullopt;
}

// Where a key's value came from: the last override that set it or a section above it, else the
// file and line of the node.
std::string YamlReader::where(const std::string& key, const YAML::Node& node) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    const auto& k = it->key;
    const bool covers = key == k || key.rfind(k + ".", 0) == 0 || k.rfind(key + ".", 0) == 0;
    if (covers) return origin_of(*it);
  }
  return yaml_location(source_, node);
}

void YamlReader::fail(const YAML::Node& node, const char* key, const std::string& problem) const {
  const auto full = path(key);
  throw ConfigError(where(full, node), full, full + ": " + problem);
}

// A sibling close to `key`, else the right key in the wrong section (data.lr for optim.lr).
std::string YamlReader::suggest_key(const Frame& frame, const std::string& key) const {
  const std::vector<std::string> siblings(frame.known.begin(), frame.known.end());
  const auto sibling = closest(key, siblings);
  if (!sibling.empty()) return frame.path.empty() ? sibling : frame.path + "." + sibling;
  std::string elsewhere;
  for (const auto& candidate : all_keys_) {
    const auto dot = candidate.rfind('.');
    if (candidate.substr(dot == std::string::npos ? 0 : dot + 1) == key) elsewhere = candidate;
  }
  return elsewhere;
}

void YamlReader::reject_unknown_keys() const {
  const Frame& frame = frames_.back();
  if (!frame.node.IsDefined() || !frame.node.IsMap()) return;
  std::set<std::string> seen;
  for (const auto& entry : frame.node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const std::string full = frame.path.empty() ? key : frame.path + "." + key;
    if (!seen.insert(key).second) {
      throw ConfigError(where(full, entry.first), full,
                        "duplicate key " + full + "; keep one of the two entries");
    }
    if (frame.known.count(key)) continue;
    std::string message = "unknown key " + full;
    const auto suggestion = suggest_key(frame, key);
    if (!suggestion.empty()) {
      message += "; did you mean " + suggestion + "?";
    } else {
      const std::vector<std::string> siblings(frame.known.begin(), frame.known.end());
      message += "; allowed keys" + (frame.path.empty() ? std::string() : " in " + frame.path) + ": " +
                 join(siblings);
    }
    throw ConfigError(where(full, entry.first), full, message);
  }
}

}  // namespace dtrain::config
