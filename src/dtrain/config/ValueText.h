// Scalars as text, for config/'s readers and writers: strict parsing of integers, numbers and
// booleans, floats written so they read back identical, ranges described for error messages, and
// the nearest allowed word for "did you mean ...?".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/config/Options.h"

namespace dtrain::config::detail {

std::optional<std::int64_t> parse_int(const std::string& s);
// Decimal notation only: no "inf", "nan" or hexadecimal floats, which a configuration never means.
std::optional<double> parse_double(const std::string& s);
// YAML 1.1's spellings: true/yes/on and false/no/off, in lower, title or upper case.
std::optional<bool> parse_bool(const std::string& s);
// Shortest text that reads back as the same double, always with a '.' or an exponent so that
// every YAML reader (YAML 1.1 included) sees a float.
std::string format_double(double x);

// "a positive integer", "an integer in [0, 4]", "a number in [0, 1)".
std::string describe(const IntRange& r);
std::string describe(const Range& r);
bool in_range(double x, const Range& r);

std::string join(const std::vector<std::string>& items, const char* separator = ", ");
// The candidate closest to `word` (case aside) when it is close enough to be a likely typo, else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace dtrain::config::detail
