// CRC32C (Castagnoli) as TFRecord frames use it, computed with ISA-L's CRC instruction
// path, and the masking TensorFlow applies so a CRC of data holding CRCs stays strong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem::data {

// Standard CRC32C: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* bytes, size_t size);
inline uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }

// Continues a CRC32C over more bytes: crc32c_extend(crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* bytes, size_t size);

constexpr uint32_t kCrcMaskDelta = 0xa282ead8u;

constexpr uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrcMaskDelta; }

constexpr uint32_t unmask_crc(uint32_t masked) {
  uint32_t rot = masked - kCrcMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace tandem::data
