// See OptionChecker.h. Each check is the YamlReader's for the same visit, on the value in place; a
// value is quoted in a message as the reader quotes the scalar config.yaml would hold for it.
#include "dtrain/config/OptionChecker.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/ValueText.h"

namespace dtrain::config {
namespace {

// "4": a plain scalar as the reader quotes what it found.
std::string scalar_text(const std::string& text) {
  return "\"" + text + "\"";
}

}  // namespace

OptionChecker::OptionChecker(std::string prefix, std::string where) : where_(std::move(where)) {
  if (!prefix.empty()) prefixes_.push_back(std::move(prefix));
}

template <class T>
void OptionChecker::check_integer(const char* key, T value, const IntRange& range) {
  bool inside;
  if constexpr (std::is_unsigned_v<T>) {
    inside = range.max >= 0 && value <= static_cast<std::uint64_t>(range.max) &&
             (range.min <= 0 || value >= static_cast<std::uint64_t>(range.min));
  } else {
    inside = value >= range.min && value <= range.max;
  }
  if (!inside)
    fail(key, "expected " + detail::describe(range) + ", found " + scalar_text(std::to_string(value)));
}

void OptionChecker::integer(const char* key, int& value, IntRange range, const char*) {
  check_integer(key, value, range);
}

void OptionChecker::integer(const char* key, std::int64_t& value, IntRange range, const char*) {
  check_integer(key, value, range);
}

void OptionChecker::integer(const char* key, std::uint64_t& value, IntRange range, const char*) {
  check_integer(key, value, range);
}

// The reader takes finite decimals only (detail::parse_double).
void OptionChecker::number(const char* key, double& value, Range range, const char*) {
  if (!std::isfinite(value) || !detail::in_range(value, range)) {
    fail(key, "expected " + detail::describe(range) + ", found " + scalar_text(detail::format_double(value)));
  }
}

void OptionChecker::choice(const char* key, std::string& value, const ChoiceSet& allowed, const char*) {
  const auto canonical = allowed.resolve(value);
  if (!canonical) {
    std::string message = "expected one of " + allowed.list() + "; found " + scalar_text(value);
    const auto suggestion = detail::closest(value, allowed.names());
    if (!suggestion.empty()) message += "; did you mean " + suggestion + "?";
    fail(key, message);
  }
  value = *canonical;
}

// An enum holds one of its names by construction; name() is an internal error for a value missing
// from its table.
void OptionChecker::enum_choice(const char*, const EnumField& value, const char*) {
  (void)value.name();
}

void OptionChecker::text(const char* key, std::string& value, Text rule, const char*) {
  if (rule != Text::Any && value.empty()) fail(key, "expected a non-empty string, found nothing");
  const bool control = std::any_of(value.begin(), value.end(),
                                   [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  if (rule == Text::Name &&
      (value.find('/') != std::string::npos || value == "." || value == ".." || control)) {
    fail(key,
         "expected a name without '/' or control characters, not . or .. (it names the run folder), found " +
             scalar_text(value));
  }
}

template <class T>
void OptionChecker::check_int_list(const char* key, const std::vector<T>& values, std::int64_t min,
                                   bool allow_empty) {
  const std::string expected = std::string("expected a sequence of ") + (allow_empty ? "" : "one or more ") +
                               "integers >= " + std::to_string(min) + ", e.g. [3, 32, 32]; found ";
  if (!allow_empty && values.empty()) fail(key, expected + "a sequence");
  for (const T v : values) {
    if (static_cast<std::int64_t>(v) < min)
      fail(key, expected + scalar_text(std::to_string(v)) + " in the sequence");
  }
}

void OptionChecker::int_list(const char* key, std::vector<int>& value, std::int64_t min, bool allow_empty,
                             const char*) {
  check_int_list(key, value, min, allow_empty);
}

void OptionChecker::int_list(const char* key, std::vector<std::int64_t>& value, std::int64_t min,
                             bool allow_empty, const char*) {
  check_int_list(key, value, min, allow_empty);
}

// config.yaml writes an empty string as "", which the reader sees as a quoted string.
void OptionChecker::text_list(const char* key, std::vector<std::string>& value, const char*) {
  for (const auto& item : value) {
    if (item.empty()) {
      fail(key,
           "expected a sequence of non-empty strings, e.g. [\"layers.0.*\"]; found the quoted string "
           "\"\" in the sequence");
    }
  }
}

void OptionChecker::section(const char* key, const std::function<void()>& body, const char* unused) {
  if (unused) return;
  prefixes_.push_back(path(key));
  body();
  prefixes_.pop_back();
}

std::string OptionChecker::path(const char* key) const {
  return prefixes_.empty() ? std::string(key) : prefixes_.back() + "." + key;
}

void OptionChecker::fail(const char* key, const std::string& problem) const {
  const auto full = path(key);
  throw ConfigError(where_, full, full + ": " + problem);
}

}  // namespace dtrain::config
