// YAML parsing with positions in every error.
#include "dtrain/config/YamlFile.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>
#include <vector>

#include "dtrain/config/ConfigError.h"

namespace dtrain::config {
namespace {

// The offset of the first byte that does not belong to a well-formed UTF-8 sequence (overlong
// forms, surrogates and code points above U+10FFFF included), or npos.
std::size_t first_invalid_utf8(const std::string& text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = byte(i);
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;  // the second byte's range
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
      if (c == 0xe0) low = 0xa0;
      if (c == 0xed) high = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
      if (c == 0xf0) low = 0x90;
      if (c == 0xf4) high = 0x8f;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    if (byte(i + 1) < low || byte(i + 1) > high) return i;
    for (std::size_t k = 2; k < length; ++k) {
      if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return i;
    }
    i += length;
  }
  return std::string::npos;
}

std::string at_line(const std::string& source, const std::string& text, std::size_t offset) {
  return source + ":" + std::to_string(1 + std::count(text.begin(), text.begin() + offset, '\n'));
}

// Where the quoted scalar opening at text[open] (' or ") closes, or npos when nothing closes it.
std::size_t quote_end(const std::string& text, std::size_t open) {
  const char quote = text[open];
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character is the escaped one
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' inside single quotes is one quote
      } else {
        return i;
      }
    }
  }
  return std::string::npos;
}

[[noreturn]] void refuse_unclosed_quote(const std::string& source, const std::string& text,
                                        std::size_t open) {
  throw ConfigError(at_line(source, text, open), "",
                    std::string("a quoted string that is never closed (no matching ") + text[open] +
                        " before the end of the file)");
}

// Whether text[i] ends an indicator such as "- " or ": ": a blank, a line break or the end.
bool ends_indicator(const std::string& text, std::size_t i) {
  return i >= text.size() || text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
}

// Note [Where an unclosed quote opens]
// A quoted scalar may span lines, so yaml-cpp reads an unclosed one to the end of the text. In a
// block mapping it then takes the end as the closing quote (check_quotes below refuses that); in
// a flow collection ([...], {...}) it fails at the end of the file, "end of sequence flow not
// found", naming the last line while the mistake may be hundreds of lines up. yaml-cpp's error
// has no trace of where the scalar began, so the text is scanned for it: a quote opens a scalar
// only where a node may start (after indentation, "- ", "? ", ": ", '[', '{', ',' or an anchor or
// tag), never inside a plain scalar (it's), a comment, another quoted scalar (escapes \" and ''
// included) or a block scalar (| or >, to the first line indented no deeper than its key). The
// scan is a heuristic, so its answer replaces yaml-cpp's only when yaml-cpp failed at or after the
// quote: a quote that really is never closed is then the likeliest cause.

// Where the block scalar whose header (| or >) is at text[header] ends: the line break before its
// first line that is not blank and is indented no deeper than its key (at `key_column`); npos when
// it runs to the end of the text.
std::size_t block_scalar_end(const std::string& text, std::size_t header, std::size_t key_column) {
  std::size_t i = text.find('\n', header);
  for (; i != std::string::npos; i = text.find('\n', i + 1)) {
    std::size_t indent = i + 1;
    while (indent < text.size() && text[indent] == ' ') ++indent;
    if (indent < text.size() && text[indent] != '\n' && text[indent] != '\r' &&
        indent - (i + 1) <= key_column) {
      break;
    }
  }
  return i;
}

// The offset of the quote that opens a quoted scalar never closed, or npos.
std::size_t unclosed_quote(const std::string& text) {
  const std::size_t npos = std::string::npos;
  std::size_t line_start = 0;
  std::size_t key_column = 0;  // the column of the line's innermost block entry: its key or "- "
  bool line_entry = true;      // nothing on this line yet but "- " and "? "
  bool node_start = true;      // a node may begin at the next character
  int flow = 0;                // how deep in [...] and {...}
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t column = i - line_start;
    if (c == '\n') {
      line_start = ++i;
      line_entry = node_start = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    const bool comment = c == '#' && (i == line_start || text[i - 1] == ' ' || text[i - 1] == '\t');
    if (comment || (column == 0 && c == '%')) {  // a comment, or a directive: to the line's end
      i = text.find('\n', i);
      if (i == npos) return npos;
      continue;
    }
    if (column == 0 && (text.compare(i, 3, "---") == 0 || text.compare(i, 3, "...") == 0) &&
        ends_indicator(text, i + 3)) {
      i += 3;
      flow = 0;
      continue;
    }
    if (flow == 0 && line_entry) {
      if ((c == '-' || c == '?') && ends_indicator(text, i + 1)) {
        key_column = column;
        node_start = true;
        ++i;
        continue;
      }
      if (c != '|' && c != '>') key_column = column;
      line_entry = false;
    }
    if (node_start && (c == '"' || c == '\'')) {
      const std::size_t end = quote_end(text, i);
      if (end == npos) return i;
      i = end + 1;
      node_start = false;
    } else if (node_start && flow == 0 && (c == '|' || c == '>')) {
      i = block_scalar_end(text, i, key_column);
      if (i == npos) return npos;
    } else if (node_start && (c == '&' || c == '!')) {  // an anchor or a tag: the node follows
      while (i < text.size() && !ends_indicator(text, i) && !(flow > 0 && std::strchr(",[]{}", text[i]))) ++i;
    } else if (c == '[' || c == '{') {
      if (node_start || flow > 0) {
        ++flow;
        node_start = true;
      } else {
        node_start = false;  // inside a plain scalar
      }
      ++i;
    } else if ((c == ']' || c == '}') && flow > 0) {
      --flow;
      node_start = false;
      ++i;
    } else if (c == ',' && flow > 0) {
      node_start = true;
      ++i;
    } else if (c == ':' && (ends_indicator(text, i + 1) ||
                            (flow > 0 && std::strchr(",[]{}\"'", text[i + 1]) != nullptr))) {
      node_start = true;  // in a flow collection a value may follow ':' at once, as in {"a":"b"}
      ++i;
    } else {
      node_start = false;
      ++i;
    }
  }
  return npos;
}

// The offset of the node itself at or after `pos`, past the anchor and tag a node's mark starts
// with (&a !!str "text").
std::size_t past_properties(const std::string& text, std::size_t pos) {
  while (pos < text.size() && (text[pos] == '&' || text[pos] == '!')) {
    while (pos < text.size() && !ends_indicator(text, pos)) ++pos;
    while (pos < text.size() && ends_indicator(text, pos)) ++pos;
  }
  return pos;
}

// Throws naming the line of the first quoted scalar in `node` that is not closed.
void check_quotes(const YAML::Node& node, const std::string& text, const std::string& source) {
  if (node.IsScalar()) {
    const auto mark = node.Mark();
    if (!mark.is_null() && mark.pos >= 0 && static_cast<std::size_t>(mark.pos) < text.size()) {
      // A plain scalar never starts with a quote, so one here opens a quoted scalar.
      const auto pos = past_properties(text, static_cast<std::size_t>(mark.pos));
      if (pos < text.size() && (text[pos] == '"' || text[pos] == '\'') &&
          quote_end(text, pos) == std::string::npos) {
        refuse_unclosed_quote(source, text, pos);
      }
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) check_quotes(item, text, source);
  } else if (node.IsMap()) {
    for (const auto& item : node) {
      check_quotes(item.first, text, source);
      check_quotes(item.second, text, source);
    }
  }
}

// Where each document of a stream starts (its first node), for at most as many documents as the
// parser is asked for (see Note [Counting documents without LoadAll]), and the two sizes Note [YAML
// bombs] bounds: how deep the document nests and how many nodes it holds once every alias is
// expanded. The parser reports an alias as one event, without expanding it.
class DocumentStarts : public YAML::EventHandler {
 public:
  explicit DocumentStarts(std::string source) : source_(std::move(source)) {}
  std::vector<YAML::Mark> marks;
  void OnDocumentStart(const YAML::Mark&) override {
    first_node_ = true;
    open_.clear();
    expanded_ = 0;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor, 1); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = sizes_.find(anchor);
    leaf(mark, 0, it == sizes_.end() ? 1 : it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    leaf(mark, anchor, 1);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, anchor);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Open {
    YAML::anchor_t anchor;
    std::uint64_t nodes;  // itself and what it holds so far, aliases expanded
  };

  void node(const YAML::Mark& mark) {
    if (first_node_) marks.push_back(mark);
    first_node_ = false;
  }
  void add(const YAML::Mark& mark, std::uint64_t nodes) {
    expanded_ += nodes;
    if (!open_.empty()) open_.back().nodes += nodes;
    if (expanded_ > kMaxExpandedNodes) {
      throw ConfigError(
          source_ + ":" + std::to_string(mark.line + 1), "",
          "YAML aliases here expand the document beyond " + std::to_string(kMaxExpandedNodes) +
              " values (aliases of aliases multiply); a configuration needs far fewer: write the "
              "values out or use fewer levels of aliases");
    }
  }
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor, std::uint64_t nodes) {
    node(mark);
    if (anchor != YAML::NullAnchor) sizes_[anchor] = nodes;
    add(mark, nodes);
  }
  void open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    node(mark);
    if (open_.size() >= kMaxYamlDepth) {
      throw ConfigError(source_ + ":" + std::to_string(mark.line + 1), "",
                        "nested more than " + std::to_string(kMaxYamlDepth) +
                            " levels deep; a configuration nests a few levels (is it the right file?)");
    }
    open_.push_back({anchor, 0});
    add(mark, 1);
  }
  void close() {
    const auto done = open_.back();
    open_.pop_back();
    if (done.anchor != YAML::NullAnchor) sizes_[done.anchor] = done.nodes + 1;
    // The container itself was counted once by open(); what it holds was added as it came.
  }

  std::string source_;
  bool first_node_ = false;
  std::vector<Open> open_;
  std::map<YAML::anchor_t, std::uint64_t> sizes_;
  std::uint64_t expanded_ = 0;
};

// Note [Counting documents without LoadAll]
// yaml-cpp 0.7's YAML::LoadAll loops for ever, appending null documents until memory runs out, on
// a stream whose parser stops consuming tokens (e.g. a line holding only ',' after '---'; found
// by tests/fuzz's config target; yaml-cpp fixed it in 0.8.1, jbeder/yaml-cpp#1319). So the
// documents are counted with the parser itself, asking for at most two (one is allowed), and the
// first is then loaded with YAML::Load, which parses a single document.
}  // namespace

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  if (const auto bad = first_invalid_utf8(text); bad != std::string::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(text[bad]));
    throw ConfigError(at_line(source, text, bad), "",
                      std::string("not valid UTF-8 (byte ") + hex + "); save the file as UTF-8");
  }
  DocumentStarts starts(source);
  YAML::Node document;
  try {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    bool empty = true;
    for (int n = 0; n < 2 && parser.HandleNextDocument(starts); ++n) empty = false;
    if (starts.marks.size() > 1) {
      throw ConfigError(source + ":" + std::to_string(starts.marks[1].line + 1), "",
                        "a second YAML document (after '---'); a configuration is one document");
    }
    if (empty) return YAML::Node();
    document = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // See Note [Where an unclosed quote opens].
    const std::size_t open = unclosed_quote(text);
    if (open != std::string::npos && !e.mark.is_null() && e.mark.pos >= 0 &&
        open <= static_cast<std::size_t>(e.mark.pos)) {
      refuse_unclosed_quote(source, text, open);
    }
    const std::string where = e.mark.is_null() ? source : source + ":" + std::to_string(e.mark.line + 1);
    throw ConfigError(where, "", "invalid YAML: " + e.msg);
  }
  check_quotes(document, text, source);
  return document;
}

YAML::Node load_yaml_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(path, "",
                      std::string("cannot open the configuration file (") + std::strerror(errno) +
                          "); check the path, relative paths are taken from the working directory");
  }
  std::error_code ignored;
  const auto size = std::filesystem::file_size(path, ignored);
  if (!ignored && size > kMaxConfigBytes) {
    throw ConfigError(path, "",
                      "is " + std::to_string(size) + " bytes; a configuration file is at most " +
                          std::to_string(kMaxConfigBytes) + " (is it the right file?)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto root = parse_yaml(text.str(), path);
  if (root.IsNull()) {
    throw ConfigError(path, "",
                      "holds no settings (empty, or only comments); give at least one key, or leave the "
                      "file out to use the defaults");
  }
  return root;
}

std::string key_text(const std::string& source, const YAML::Node& key, const std::string& within) {
  if (key.IsScalar()) return key.Scalar();
  const std::string what = key.IsSequence() ? "a list" : key.IsMap() ? "a mapping" : "an empty key";
  throw ConfigError(yaml_location(source, key), within,
                    (within.empty() ? std::string() : within + ": ") + "a key that is " + what +
                        "; keys are names, e.g. lr: 0.1");
}

std::string yaml_location(const std::string& source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null() || mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

}  // namespace dtrain::config
