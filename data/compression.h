// The whole-stream compressions TFRecord files use (none, GZIP, ZLIB), their names, and
// the rule that tells them apart from the first bytes of a file (docs/TFRECORD.md).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::data {

enum class Compression { kNone, kGzip, kZlib, kAuto };

std::string_view compression_name(Compression c);  // "none", "gzip", "zlib", "auto"
// Accepts the names above and TensorFlow's spellings ("", "GZIP", "ZLIB"); throws kInvalidArgument.
Compression parse_compression(std::string_view name);

// Decides from the first bytes of a file (up to 12). A valid uncompressed record header (its
// length CRC matches) wins over magic bytes, because a record length can begin 1f 8b or 78 xx.
Compression detect_compression(const unsigned char* head, size_t size);

// Throws InvalidArgument unless path is a regular file (or a link to one): a FIFO or a device
// would block the open or lose the bytes read to detect the compression (`<(cat f)`). Missing
// paths pass, for the open to report.
void check_regular_file(const std::string& path);

// Opens path, reads its head and detects; throws kNotFound when it cannot be opened.
// *certain (optional) is false when the bytes match nothing, and kNone is only the fallback.
Compression detect_file_compression(const std::string& path, bool* certain = nullptr);

}  // namespace tandem::data
