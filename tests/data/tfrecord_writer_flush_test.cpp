// TFRecordWriter::flush: records written so far are in the file while it stays open (what a
// TensorBoard following an event file needs), for plain files and through a sync-flushed GZIP stream.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/core/error.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

using testing::TempDir;

size_t count_records(const std::string& path) {
  TFRecordReader reader(path);
  std::string_view r;
  size_t n = 0;
  while (reader.next(&r)) ++n;
  return n;
}

// Inflates a GZIP stream that may not be finished yet: everything up to the last sync flush.
std::string inflate_partial(const std::string& compressed) {
  z_stream zs{};
  EXPECT_EQ(inflateInit2(&zs, MAX_WBITS + 16), Z_OK);
  std::string out(1 << 20, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  zs.avail_in = static_cast<uInt>(compressed.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = inflate(&zs, Z_SYNC_FLUSH);
  EXPECT_TRUE(rc == Z_OK || rc == Z_BUF_ERROR) << rc;
  out.resize(zs.total_out);
  inflateEnd(&zs);
  return out;
}

TEST(TFRecordWriterFlush, PlainRecordsAreReadableWhileTheWriterIsOpen) {
  TempDir dir;
  std::string path = (dir.path() / "open.tfrecord").string();
  TFRecordWriter writer(path);
  writer.write("one");
  writer.write("two");
  EXPECT_EQ(count_records(path), 0u) << "buffered until a flush";
  writer.flush();
  EXPECT_EQ(count_records(path), 2u);
  EXPECT_EQ(writer.bytes_written(), 2 * (12 + 3 + 4u));
  writer.write("three");
  writer.close();
  EXPECT_EQ(count_records(path), 3u);
  EXPECT_THROW(writer.flush(), Error);
}

TEST(TFRecordWriterFlush, GzipSyncFlushPutsEveryRecordSoFarInTheFile) {
  TempDir dir;
  std::string path = (dir.path() / "open.tfrecord.gz").string();
  TFRecordWriterOptions options;
  options.compression = Compression::kGzip;
  TFRecordWriter writer(path, options);
  writer.write("one");
  writer.write("two");
  writer.flush();
  EXPECT_EQ(inflate_partial(testing::read_file(path)), frame_record("one") + frame_record("two"));
  writer.write("three");
  writer.close();
  EXPECT_EQ(count_records(path), 3u);  // the finished stream is still one valid GZIP file
}

}  // namespace
}  // namespace tandem::data
