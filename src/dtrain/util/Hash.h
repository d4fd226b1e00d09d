// FNV-1a 64: a hash that is stable across processes, builds and machines (std::hash is not), for
// fingerprints that ranks or runs compare: initial parameters, data partitions, module layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::util {

class Fnv1a64 {
 public:
  void add(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
      value_ ^= bytes[i];
      value_ *= 1099511628211ULL;
    }
  }
  void add(const std::string& text) { add(text.data(), text.size()); }

  std::uint64_t value() const { return value_; }
  // 16 lower-case hex digits.
  std::string hex() const {
    static const char* digits = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 15, shift = 0; i >= 0; --i, shift += 4) out[i] = digits[(value_ >> shift) & 0xf];
    return out;
  }

 private:
  std::uint64_t value_ = 1469598103934665603ULL;
};

}  // namespace dtrain::util
