// Index files: built by one pass of the reader, written and parsed as DALI's text format.
#include "data/tfrecord_index.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "engine/core/output_file.h"

namespace tandem::data {

std::vector<IndexEntry> build_index(const std::string& tfrecord_path) {
  TFRecordReaderOptions options;
  options.compression = Compression::kAuto;
  TFRecordReader reader(tfrecord_path, options);
  TANDEM_CHECK(reader.compression() == Compression::kNone, ErrorCode::kFailedPrecondition,
               "cannot index {}: it is {}-compressed, and an index needs byte offsets of an uncompressed file",
               tfrecord_path, compression_name(reader.compression()));
  std::vector<IndexEntry> entries;
  uint64_t start = reader.offset();
  std::string_view record;
  while (reader.next(&record)) {
    entries.push_back({start, reader.offset() - start});
    start = reader.offset();
  }
  return entries;
}

void write_index(const std::string& index_path, const std::vector<IndexEntry>& entries) {
  std::string text;
  text.reserve(entries.size() * 16);
  for (const IndexEntry& e : entries) fmt::format_to(std::back_inserter(text), "{} {}\n", e.offset, e.size);
  write_file_atomically(index_path, text, "tfrecord index");
}

std::vector<IndexEntry> read_index(const std::string& index_path) {
  std::ifstream in(index_path);
  TANDEM_CHECK(in.good(), ErrorCode::kNotFound, "cannot open index {}", index_path);
  std::vector<IndexEntry> entries;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    IndexEntry e{};
    const char* p = line.data();
    const char* end = p + line.size();
    auto r1 = std::from_chars(p, end, e.offset);
    bool ok = r1.ec == std::errc() && r1.ptr < end && *r1.ptr == ' ';
    if (ok) {
      auto r2 = std::from_chars(r1.ptr + 1, end, e.size);
      ok = r2.ec == std::errc() && (r2.ptr == end || *r2.ptr == '\r');
    }
    TANDEM_CHECK(ok, ErrorCode::kDataLoss, "index {} line {}: expected \"OFFSET SIZE\", got \"{}\"", index_path, line_no,
                 line);
    entries.push_back(e);
  }
  return entries;
}

}  // namespace tandem::data
