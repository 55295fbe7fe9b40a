// inspect_file: one pass of the reader, each record parsed and folded into the statistics.
#include "data/inspect.h"

#include "data/tfrecord_reader.h"
#include "engine/core/error.h"

namespace tandem::data {

std::string FileReport::kind() const {
  if (num_records == 0) return "";
  if (other_records > 0) return "other";
  if (stats.kinds.count(MessageKind::kSequenceExample)) return "SequenceExample";
  return "Example";
}

FileReport inspect_file(const std::string& path, const InspectOptions& options) {
  FileReport report;
  report.path = path;
  std::optional<TFRecordReader> reader;
  try {
    TFRecordReaderOptions reader_options;
    reader_options.compression = options.compression;
    reader.emplace(path, reader_options);
    report.compression = reader->compression();
    std::string_view payload;
    while (reader->next(&payload)) {
      const uint64_t index = report.num_records++;
      bool keep = options.dump < 0 || index < static_cast<uint64_t>(options.dump);
      DumpedRecord dumped{index, {}, payload.size(), {}};
      try {
        dumped.record = parse_record(payload);
        report.stats.add(dumped.record);
      } catch (const Error& e) {
        ++report.other_records;
        dumped.parse_error = e.what();
        if (report.first_parse_error.empty()) report.first_parse_error = fmt::format("record {}: {}", index, e.what());
        if (options.verify && !report.error) {
          uint64_t end = reader->offset();
          report.error = InspectError{fmt::format("record {} of {} is {}", index, path, e.what()),
                                      end - payload.size() - 16, index};
        }
      }
      if (keep) report.records.push_back(std::move(dumped));
    }
  } catch (const Error& e) {
    if (reader && reader->fault()) {
      report.error = InspectError{reader->fault()->message, reader->fault()->offset, reader->fault()->record};
    } else {
      report.error = InspectError{e.what(), std::nullopt, std::nullopt};
    }
  }
  return report;
}

}  // namespace tandem::data
