// See ValueText.h.
#include "dtrain/config/ValueText.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace dtrain::config::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Edits from `a` to `b` without regard to case, as names are matched ("MNISTNets" is one edit from
// mnistnet); swapping two neighbouring letters counts as one edit, the commonest typo ("trian").
std::size_t edit_distance(const std::string& a, const std::string& b) {
  auto same = [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  };
  // Three rows of the table: for a's prefixes of length i - 2, i - 1 and i.
  std::vector<std::size_t> before(b.size() + 1), above(b.size() + 1), row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    before.swap(above);
    above.swap(row);
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      row[j] = std::min({above[j] + 1, row[j - 1] + 1, above[j - 1] + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1])) {
        row[j] = std::min(row[j], before[j - 2] + 1);
      }
    }
  }
  return row[b.size()];
}

}  // namespace

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  if (word.empty()) return best;
  std::size_t best_distance = std::max<std::size_t>(1, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const auto d = edit_distance(word, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::string describe(const IntRange& r) {
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (r.min == kMin && r.max == kMax) return "an integer";
  if (r.max == kMax) return r.min == 1 ? "a positive integer" : "an integer >= " + std::to_string(r.min);
  if (r.min == kMin) return "an integer <= " + std::to_string(r.max);
  if (r.min == r.max) return "the integer " + std::to_string(r.min);
  return "an integer in [" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]";
}

std::string describe(const Range& r) {
  if (r.min == 0.0 && r.min_open && r.max == kInf) return "a positive number";
  if (r.max == kInf) return fmt::format("a number {} {}", r.min_open ? ">" : ">=", r.min);
  return fmt::format("a number in {}{}, {}{}", r.min_open ? "(" : "[", r.min, r.max, r.max_open ? ")" : "]");
}

bool in_range(double x, const Range& r) {
  if (x < r.min || (r.min_open && x == r.min)) return false;
  if (x > r.max || (r.max_open && x == r.max)) return false;
  return true;
}

std::optional<std::int64_t> parse_int(const std::string& s) {
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (begin != end && *begin == '+') ++begin;
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return value;
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  for (const char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' ||
          c == '-')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<bool> parse_bool(const std::string& s) {
  static const std::vector<std::string> kTrue{"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
  static const std::vector<std::string> kFalse{"false", "False", "FALSE", "no", "No",
                                               "NO",    "off",   "Off",   "OFF"};
  if (std::find(kTrue.begin(), kTrue.end(), s) != kTrue.end()) return true;
  if (std::find(kFalse.begin(), kFalse.end(), s) != kFalse.end()) return false;
  return std::nullopt;
}

std::string format_double(double x) {
  std::string s = fmt::format("{}", x);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  if (s.find('.') == std::string::npos) {
    const auto e = s.find_first_of("eE");
    if (e != std::string::npos) s.insert(e, ".0");
  }
  return s;
}

}  // namespace dtrain::config::detail
