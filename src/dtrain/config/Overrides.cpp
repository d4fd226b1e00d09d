// Dotted overrides: parsing "key=value" and writing the value into a YAML tree.
#include "dtrain/config/Overrides.h"

#include <yaml-cpp/yaml.h>

#include <cctype>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/YamlFile.h"

namespace dtrain::config {
namespace {

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (true) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

bool valid_segment(const std::string& segment) {
  if (segment.empty()) return false;
  for (const char c : segment) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

std::string where_of(const std::string& text) {
  return "override \"" + text + "\"";
}

const char* kind_of(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "a value";
    case YAML::NodeType::Sequence:
      return "a sequence";
    default:
      return "not a section";
  }
}

}  // namespace

std::string origin_of(const Override& override_) {
  return override_.flag ? override_.text : "override \"" + override_.text + "\"";
}

Override parse_override(const std::string& text) {
  const auto eq = text.find('=');
  const auto trimmed = trim(text);
  if (eq == std::string::npos && !trimmed.empty() && trimmed.front() == '~') {
    Override removal{trim(trimmed.substr(1)), "null", text};
    removal.remove = true;
    for (const auto& segment : split_key(removal.key)) {
      if (!valid_segment(segment)) {
        throw ConfigError(
            where_of(text), removal.key,
            "expected ~ and a dotted key of letters, digits, '_' and '-', e.g. ~optim.momentum; "
            "found \"" +
                removal.key + "\"");
      }
    }
    return removal;
  }
  if (eq == std::string::npos) {
    throw ConfigError(where_of(text), "",
                      "expected key=value with a dotted key, e.g. optim.lr=0.01 (key=null or ~key removes a "
                      "key); found no '='");
  }
  Override result{trim(text.substr(0, eq)), trim(text.substr(eq + 1)), text};
  // YAML's spellings of null; an empty value stays an error of the reader ("found nothing").
  result.remove =
      result.value == "null" || result.value == "Null" || result.value == "NULL" || result.value == "~";
  for (const auto& segment : split_key(result.key)) {
    if (!valid_segment(segment)) {
      throw ConfigError(where_of(text), result.key,
                        "expected a dotted key of letters, digits, '_' and '-' before '=', e.g. "
                        "optim.scheduler.name=cosine; found \"" +
                            result.key + "\"");
    }
  }
  return result;
}

std::vector<Override> parse_overrides(const std::vector<std::string>& texts) {
  std::vector<Override> result;
  result.reserve(texts.size());
  for (const auto& text : texts) result.push_back(parse_override(text));
  return result;
}

void apply_overrides(YAML::Node& root, const std::vector<Override>& overrides) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const auto& override_ : overrides) {
    YAML::Node value;
    try {
      value = parse_yaml(override_.value, origin_of(override_));
    } catch (const ConfigError& e) {
      throw ConfigError(origin_of(override_), override_.key,
                        override_.key + ": the value is not valid YAML (" + e.message() +
                            "); quote strings and write sequences as [a, b]");
    }
    const bool remove = override_.remove;
    if (!root.IsMap()) {
      throw ConfigError(origin_of(override_), override_.key,
                        "the document is not a mapping of keys, so no key can be overridden");
    }
    const auto parts = split_key(override_.key);
    // yaml-cpp's operator= on a Node writes through to the node it refers to; reset() rebinds.
    YAML::Node cursor;
    cursor.reset(root);
    std::string prefix;
    bool found = true;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix += (i ? "." : "") + parts[i];
      if (remove && !(cursor.IsMap() && cursor[parts[i]].IsMap())) {
        found = false;  // nothing to take out below a section the document does not have
        break;
      }
      YAML::Node child = cursor[parts[i]];
      if (!child.IsDefined() || child.IsNull()) {
        cursor[parts[i]] = YAML::Node(YAML::NodeType::Map);
        child.reset(cursor[parts[i]]);
      } else if (!child.IsMap()) {
        throw ConfigError(origin_of(override_), override_.key,
                          override_.key + ": " + prefix + " is " + kind_of(child) +
                              ", not a section with keys; override " + prefix + " itself instead");
      }
      cursor.reset(child);
    }
    if (remove) {
      if (found) cursor.remove(parts.back());
    } else {
      cursor[parts.back()] = value;
    }
  }
}

}  // namespace dtrain::config
