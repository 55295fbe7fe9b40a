// ISA-L's crc32_iscsi neither pre- nor post-inverts: the standard CRC32C is
// ~crc32_iscsi(buf, len, ~0). The test vector "123456789" pins that convention in tests.
#include "data/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace tandem::data {

uint32_t crc32c_extend(uint32_t crc, const void* bytes, size_t size) {
  // ISA-L takes an int length and a non-const pointer it only reads; feed it in chunks.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(bytes));
  uint32_t state = ~crc;
  while (size > 0) {
    size_t chunk = size > static_cast<size_t>(INT_MAX / 2) ? static_cast<size_t>(INT_MAX / 2) : size;
    state = crc32_iscsi(p, static_cast<int>(chunk), state);
    p += chunk;
    size -= chunk;
  }
  return ~state;
}

uint32_t crc32c(const void* bytes, size_t size) { return crc32c_extend(0, bytes, size); }

}  // namespace tandem::data
