// Enum <-> name tables written once: an enum's names for logs, files and error messages, and the
// parse that lists every accepted name when it meets an unknown one.
//
//   constexpr util::EnumNames<ReduceOp, 4> kReduceOpNames{{{ReduceOp::Sum, "sum"}, ...}};
//   kReduceOpNames.name(ReduceOp::Sum) == "sum";
//   kReduceOpNames.parse("max", "reduce op") == ReduceOp::Max;
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace dtrain::util {

template <class Enum, std::size_t N>
struct EnumNames {
  std::array<std::pair<Enum, const char*>, N> entries;

  // The enum's name; an internal error for a value missing from the table.
  std::string name(Enum value) const {
    for (const auto& [e, n] : entries) {
      if (e == value) return n;
    }
    throw std::logic_error("EnumNames: a value has no name; add it to the table");
  }

  // The value named `text` (exactly). Throws std::invalid_argument naming `what` and every
  // accepted name otherwise: "unknown reduce op 'mean'; expected one of sum, avg, max, min".
  Enum parse(const std::string& text, const std::string& what) const {
    for (const auto& [e, n] : entries) {
      if (text == n) return e;
    }
    throw std::invalid_argument("unknown " + what + " '" + text + "'; expected one of " + list());
  }

  // "sum, avg, max, min"
  std::string list() const {
    std::string out;
    for (const auto& [e, n] : entries) out += (out.empty() ? "" : ", ") + std::string(n);
    return out;
  }
};

}  // namespace dtrain::util
