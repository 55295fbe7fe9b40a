// TFRecord framing: the CRC32C convention, writer-to-reader round trips for every
// compression, compression detection, on_corrupt policies, and index files with seeking.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>

#include "data/crc32c.h"
#include "data/compression.h"
#include "data/tfrecord_index.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/core/error.h"
#include "engine/core/random.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

using testing::TempDir;

std::vector<std::string> some_records(int n, uint64_t seed) {
  Generator g(seed);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::string r(g.below(i % 7 == 0 ? 300000 : 2000), '\0');
    for (char& c : r) c = static_cast<char>(g.next_u32());
    out.push_back(std::move(r));
  }
  out.emplace_back();  // an empty record is legal
  return out;
}

void write_all(const std::string& path, const std::vector<std::string>& records, Compression c) {
  TFRecordWriterOptions options;
  options.compression = c;
  TFRecordWriter writer(path, options);
  for (const std::string& r : records) writer.write(r);
  writer.close();
  EXPECT_EQ(writer.records_written(), records.size());
}

std::vector<std::string> read_all(const std::string& path, TFRecordReaderOptions options = {}) {
  TFRecordReader reader(path, options);
  std::vector<std::string> out;
  std::string_view r;
  while (reader.next(&r)) out.emplace_back(r);
  return out;
}

TEST(Crc32c, StandardTestVectorAndMasking) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c_extend(crc32c("1234"), "56789", 5), 0xE3069283u);
  // 32 zero bytes: RFC 3720 B.4.
  char zeros[32] = {};
  EXPECT_EQ(crc32c(zeros, 32), 0x8A9136AAu);
  for (uint32_t v : {0u, 1u, 0xE3069283u, 0xffffffffu}) EXPECT_EQ(unmask_crc(mask_crc(v)), v);
  EXPECT_NE(mask_crc(0x12345678u), 0x12345678u);
}

TEST(TFRecord, RoundTripsEveryCompression) {
  TempDir tmp;
  std::vector<std::string> records = some_records(40, 1);
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    SCOPED_TRACE(std::string(compression_name(c)));
    std::string path = tmp.file("r." + std::string(compression_name(c)));
    write_all(path, records, c);
    EXPECT_EQ(detect_file_compression(path), c);
    EXPECT_EQ(read_all(path), records);  // auto
    TFRecordReaderOptions stated;
    stated.compression = c;
    EXPECT_EQ(read_all(path, stated), records);
  }
}

TEST(TFRecord, EmptyFilesOfEveryCompressionHaveNoRecords) {
  TempDir tmp;
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    std::string path = tmp.file("empty." + std::string(compression_name(c)));
    write_all(path, {}, c);
    TFRecordReaderOptions options;
    options.compression = c;
    EXPECT_TRUE(read_all(path, options).empty());
  }
}

TEST(TFRecord, DetectionPrefersAValidHeaderOverLookalikeMagic) {
  // Record lengths 0x8b1f and 0x178 begin "1f 8b" and "78 01" (gzip and zlib magic).
  for (size_t length : {size_t{0x8b1f}, size_t{0x178}}) {
    std::string framed = frame_record(std::string(length, 'x'));
    auto* head = reinterpret_cast<const unsigned char*>(framed.data());
    EXPECT_EQ(detect_compression(head, 12), Compression::kNone) << length;
  }
  const unsigned char gzip[] = {0x1f, 0x8b, 8, 0};
  const unsigned char zlib[] = {0x78, 0x9c};
  EXPECT_EQ(detect_compression(gzip, sizeof(gzip)), Compression::kGzip);
  EXPECT_EQ(detect_compression(zlib, sizeof(zlib)), Compression::kZlib);
  EXPECT_EQ(detect_compression(nullptr, 0), Compression::kNone);
  EXPECT_EQ(parse_compression("GZIP"), Compression::kGzip);
  EXPECT_EQ(parse_compression(""), Compression::kNone);
  EXPECT_THROW(parse_compression("lz4"), Error);
}

// Three records with record 1's data damaged; returns the path.
std::string damaged_file(const TempDir& tmp) {
  std::string bytes = frame_record("first") + frame_record("second") + frame_record("third");
  bytes[12 + 5 + 4 + 12 + 2] ^= 0x40;  // inside "second"
  std::string path = tmp.file("damaged.tfrecord");
  testing::write_file(path, bytes);
  return path;
}

TEST(TFRecord, FailPolicyThrowsDataLossWithOffsetPathAndIndex) {
  TempDir tmp;
  std::string path = damaged_file(tmp);
  TFRecordReader reader(path);
  std::string_view r;
  ASSERT_TRUE(reader.next(&r));
  try {
    reader.next(&r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    std::string want = fmt::format("corrupted record at {} in {} (record 1)", 21 + 12, path);
    EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
  }
}

TEST(TFRecord, SkipAndQuarantineCountAndGoOn) {
  TempDir tmp;
  std::string path = damaged_file(tmp);
  TFRecordReaderOptions skip;
  skip.on_corrupt = OnCorrupt::kSkip;
  TFRecordReader reader(path, skip);
  std::vector<std::string> got;
  std::string_view r;
  while (reader.next(&r)) got.emplace_back(r);
  EXPECT_EQ(got, (std::vector<std::string>{"first", "third"}));
  EXPECT_EQ(reader.skipped(), 1u);

  TFRecordReaderOptions quarantine;
  quarantine.on_corrupt = OnCorrupt::kQuarantine;
  quarantine.quarantine_path = tmp.file("bad.quarantine");
  EXPECT_EQ(read_all(path, quarantine).size(), 2u);
  std::string side = testing::read_file(quarantine.quarantine_path);
  EXPECT_NE(side.find("# offset=21 record=1 bytes=6 reason=corrupted record at 33"), std::string::npos) << side;
  EXPECT_NE(side.find("se#ond"), std::string::npos);  // the damaged bytes themselves

  // Another reader of the same file (a replica under record sharding, or the next epoch) meets the
  // same bad record: the quarantine file keeps one entry for it.
  EXPECT_EQ(read_all(path, quarantine).size(), 2u);
  std::string again = testing::read_file(quarantine.quarantine_path);
  EXPECT_EQ(again, side);
}

TEST(TFRecord, AQuarantineThatCannotBeWrittenStopsTheRead) {
  TempDir tmp;
  TFRecordReaderOptions quarantine;
  quarantine.on_corrupt = OnCorrupt::kQuarantine;
  quarantine.quarantine_path = "/dev/full";  // every write fails with ENOSPC, as on a full disk
  TFRecordReader reader(damaged_file(tmp), quarantine);
  std::string_view r;
  ASSERT_TRUE(reader.next(&r));
  try {
    reader.next(&r);
    FAIL() << "the damaged record was skipped without its copy";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("cannot write the quarantined record (offset 21 of"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("to /dev/full: No space left on device"), std::string::npos) << e.what();
  }
}

TEST(TFRecord, HeaderFaultUnderSkipEndsTheFile) {
  TempDir tmp;
  std::string bytes = frame_record("a") + frame_record("b");
  bytes[17 + 3] ^= 1;  // record 1's length
  std::string path = tmp.file("len.tfrecord");
  testing::write_file(path, bytes);
  TFRecordReaderOptions skip;
  skip.on_corrupt = OnCorrupt::kSkip;
  TFRecordReader reader(path, skip);
  std::string_view r;
  ASSERT_TRUE(reader.next(&r));
  EXPECT_FALSE(reader.next(&r));
  EXPECT_EQ(reader.skipped(), 1u);
  ASSERT_TRUE(reader.fault().has_value());
  EXPECT_EQ(reader.fault()->offset, 17u);
}

TEST(TFRecord, HugeDamagedLengthIsTruncationNotAnAllocation) {
  TempDir tmp;
  std::string header(12, '\0');
  uint64_t length = ~uint64_t{0} - 3;
  std::memcpy(header.data(), &length, 8);
  uint32_t crc = mask_crc(crc32c(header.data(), 8));
  std::memcpy(header.data() + 8, &crc, 4);
  std::string path = tmp.file("huge");
  testing::write_file(path, frame_record("ok") + header + "abc");
  TFRecordReader reader(path);
  std::string_view r;
  ASSERT_TRUE(reader.next(&r));
  EXPECT_THROW(reader.next(&r), Error);
  EXPECT_EQ(reader.fault()->kind, RecordFault::Kind::kTruncated);
  EXPECT_EQ(reader.fault()->offset, 18u);
}

TEST(TFRecord, AHugeLengthInACompressedFileIsRefusedBeforeItIsBuffered) {
  // A length of 2^40 with a valid CRC, then 8 MiB of zeros: gzip makes them a few KB, and a reader
  // that buffered "as far as the stream has bytes" held all 8 MiB (406 MB from a 200 KB file).
  TempDir tmp;
  std::string header(12, '\0');
  const uint64_t length = uint64_t{1} << 40;
  std::memcpy(header.data(), &length, 8);
  const uint32_t crc = mask_crc(crc32c(header.data(), 8));
  std::memcpy(header.data() + 8, &crc, 4);
  const std::string path = tmp.file("bomb.gz");
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, header.data(), 12), 12);
  const std::string zeros(8 << 20, '\0');
  ASSERT_EQ(gzwrite(gz, zeros.data(), static_cast<unsigned>(zeros.size())), static_cast<int>(zeros.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
  TFRecordReader reader(path);
  std::string_view r;
  try {
    reader.next(&r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("says 1099511627776 data bytes, above the limit of 256 MiB"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(reader.fault()->offset, 0u);
}

TEST(TFRecord, APipeOrADirectoryIsRefusedNotWaitedOn) {
  TempDir tmp;
  const std::string fifo = tmp.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer: opening it would block for ever, so the attempt runs aside and, should it block,
  // a writer's open and close end it (this test must fail, not hang, if the check goes).
  for (const std::string& path : {fifo, tmp.file("")}) {
    auto attempt = std::async(std::launch::async, [&path] {
      try {
        TFRecordReader reader(path);
        return std::string("no error");
      } catch (const Error& e) {
        return std::string(error_code_name(e.code())) + ": " + e.what();
      }
    });
    if (attempt.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
      ::close(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK));
      FAIL() << "opening " << path << " blocked";
    }
    const std::string what = attempt.get();
    EXPECT_EQ(what.find("InvalidArgument: "), 0u) << what;
    EXPECT_NE(what.find(path == fifo ? "is a pipe (FIFO)" : "is a directory"), std::string::npos) << what;
  }
}

TEST(TFRecord, IndexFilesMatchDaliFormatAndSeek) {
  TempDir tmp;
  std::vector<std::string> records = some_records(12, 2);
  std::string path = tmp.file("i.tfrecord");
  write_all(path, records, Compression::kNone);
  std::vector<IndexEntry> index = build_index(path);
  ASSERT_EQ(index.size(), records.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(index[i].offset, offset);
    EXPECT_EQ(index[i].size, records[i].size() + 16);
    offset += index[i].size;
  }
  write_index(tmp.file("i.idx"), index);
  EXPECT_EQ(testing::read_file(tmp.file("i.idx")).substr(0, 2), "0 ");
  std::vector<IndexEntry> loaded = read_index(tmp.file("i.idx"));
  ASSERT_EQ(loaded.size(), index.size());
  TFRecordReader reader(path);
  std::string_view r;
  for (size_t i : {7u, 3u, 11u, 0u}) {
    reader.seek(i, loaded[i].offset);
    ASSERT_TRUE(reader.next(&r));
    EXPECT_EQ(r, records[i]);
    EXPECT_EQ(reader.next_index(), i + 1);
  }
  testing::write_file(tmp.file("bad.idx"), "0 16\nbanana\n");
  EXPECT_THROW(read_index(tmp.file("bad.idx")), Error);
  write_all(tmp.file("z.gz"), records, Compression::kGzip);
  EXPECT_THROW(build_index(tmp.file("z.gz")), Error);
}

}  // namespace
}  // namespace tandem::data
