// CRC32C (Castagnoli), the checksum of TFRecord framing (TensorBoard event files) and of the
// checkpoint marker; table-driven, so it needs no SSE4.2 and gives the same value everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dtrain::io {

// CRC32C of `size` bytes, continuing from `crc` (0 to start). crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);
inline std::uint32_t crc32c(std::string_view bytes) {
  return crc32c(bytes.data(), bytes.size());
}

// TFRecord's masked CRC: rotated and offset so that a CRC of data containing CRCs stays strong.
inline std::uint32_t mask_crc32c(std::uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
inline std::uint32_t unmask_crc32c(std::uint32_t masked) {
  const std::uint32_t rotated = masked - 0xa282ead8u;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace dtrain::io
