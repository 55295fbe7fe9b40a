// CRC32C (Castagnoli) for the engine's own files (a checksum per tensor in checkpoints), with
// the CPU's CRC32 instruction where there is one (SSE4.2) and a table otherwise. data/crc32c.h
// keeps ISA-L's version for TFRecord framing; both compute the same standard CRC32C.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

// Standard CRC32C: checksum_crc32c("123456789", 9) == 0xE3069283.
uint32_t checksum_crc32c(const void* bytes, size_t size);

}  // namespace tandem
