// Index files for uncompressed TFRecord files, in the text format of DALI's tfrecord2idx:
// one line per record, "OFFSET SIZE", SIZE counting the 16 framing bytes too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

struct IndexEntry {
  uint64_t offset;
  uint64_t size;
};

// Scans an uncompressed TFRecord file (CRCs checked) and returns one entry per record.
std::vector<IndexEntry> build_index(const std::string& tfrecord_path);
void write_index(const std::string& index_path, const std::vector<IndexEntry>& entries);
// Throws kDataLoss naming the line for anything but "<offset> <size>" lines.
std::vector<IndexEntry> read_index(const std::string& index_path);

}  // namespace tandem::data
