// What `trainer inspect` reports about a TFRecord file: compression, record count, message
// kind, per-key statistics, the first N records and the first fault. docs/TFRECORD.md
// describes the text and JSON forms rendered here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/compression.h"
#include "data/example.h"
#include "data/example_stats.h"

namespace tandem::data {

struct InspectOptions {
  Compression compression = Compression::kAuto;
  bool verify = false;   // also require every record to parse as Example/SequenceExample
  int64_t dump = 0;      // records to keep for printing; -1 for all
};

struct DumpedRecord {
  uint64_t index = 0;
  ParsedRecord record;      // when it parsed
  uint64_t size = 0;
  std::string parse_error;  // non-empty for a record that is neither message
};

struct InspectError {
  std::string message;
  std::optional<uint64_t> offset;  // absent when the file could not be opened at all
  std::optional<uint64_t> record;
};

struct FileReport {
  std::string path;
  Compression compression = Compression::kNone;
  uint64_t num_records = 0;
  uint64_t other_records = 0;  // records that parse as neither message
  std::string first_parse_error;
  FileStats stats;
  std::vector<DumpedRecord> records;
  std::optional<InspectError> error;

  // "Example", "SequenceExample", "other", or "" for a file with no records.
  std::string kind() const;
  bool damaged() const { return error.has_value(); }
};

// Never throws for a bad file: the fault goes into the report.
FileReport inspect_file(const std::string& path, const InspectOptions& options);

std::string render_json(const std::vector<FileReport>& reports);
std::string render_text(const FileReport& report);

}  // namespace tandem::data
