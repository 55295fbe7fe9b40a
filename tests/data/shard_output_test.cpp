// How convert and the index writer put files in place: each shard through a unique temporary
// renamed when complete (OutputFile), written by a TFRecordWriter into that temporary's
// descriptor; the old fixed "<shard>.tmp" name, which followed a planted symlink, is gone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "data/convert/convert.h"
#include "data/tfrecord_index.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/core/error.h"
#include "engine/core/output_file.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::vector<std::string> records_in(const std::string& path) {
  TFRecordReader reader(path);
  std::vector<std::string> out;
  std::string_view r;
  while (reader.next(&r)) out.emplace_back(r);
  return out;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> temporaries_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const std::string& name : names_in(dir)) {
    if (name.find(".tmp") != std::string::npos) out.push_back(name);
  }
  return out;
}

// n records "record-<i>"; record `broken` (if < n) throws as a damaged input file would.
class NumberedSource : public ConvertSource {
 public:
  explicit NumberedSource(size_t n, size_t broken = SIZE_MAX) : n_(n), broken_(broken) {}
  size_t size() const override { return n_; }
  std::string record(size_t i) const override {
    TANDEM_CHECK(i != broken_, ErrorCode::kDataLoss, "record {} is damaged", i);
    return "record-" + std::to_string(i);
  }
  int64_t label(size_t) const override { return 0; }
  uint64_t estimated_bytes() const override { return n_ * 10; }

 private:
  size_t n_, broken_;
};

TEST(ShardOutput, AWriterIntoAnOutputFilesDescriptorGivesAReadableFileAtCommit) {
  TempDir dir;
  for (Compression compression : {Compression::kNone, Compression::kGzip}) {
    const fs::path target = dir / (compression == Compression::kGzip ? "a.tfrecord.gz" : "a.tfrecord");
    OutputFile out(target, "test");
    TFRecordWriterOptions options;
    options.compression = compression;
    {
      TFRecordWriter writer(TFRecordWriteFd{out.fd()}, out.temp_path().string(), options);
      writer.write("one");
      writer.write(std::string(100000, 'x'));
      writer.write("three");
      writer.close();  // closes its own duplicate: the OutputFile's descriptor stays open
    }
    EXPECT_FALSE(fs::exists(target));
    out.commit();
    const std::vector<std::string> back = records_in(target.string());
    ASSERT_EQ(back.size(), 3u) << target;
    EXPECT_EQ(back[0], "one");
    EXPECT_EQ(back[1], std::string(100000, 'x'));
    EXPECT_EQ(back[2], "three");
  }
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"a.tfrecord", "a.tfrecord.gz"}));
}

TEST(ShardOutput, ConvertLeavesNoTemporaryEvenWhenAShardFails) {
  TempDir dir;
  ConvertOptions o;
  o.output_dir = dir.file("out");
  o.min_shards = 4;
  o.threads = 2;
  o.write_index = true;
  ConvertSummary s = convert(NumberedSource(40), o);
  EXPECT_EQ(s.records, 40u);
  EXPECT_EQ(names_in(o.output_dir).size(), 8u);  // 4 shards and their indexes
  EXPECT_EQ(temporaries_in(o.output_dir), std::vector<std::string>{});

  // A record that cannot be read stops its shard half written: "<shard>.tmp" once stayed behind.
  o.output_dir = dir.file("broken");
  try {
    convert(NumberedSource(40, 13), o);
    FAIL() << "a damaged record was converted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("record 13 is damaged"), std::string::npos) << e.what();
  }
  EXPECT_EQ(temporaries_in(o.output_dir), std::vector<std::string>{});
}

TEST(ShardOutput, ConvertLeavesASymlinkAtTheOldTemporaryNameAndItsTargetAlone) {
  TempDir dir;
  testing::write_file(dir / "victim", "precious");
  fs::create_directory(dir / "out");
  // The shard was written to "<shard>.tmp" with O_TRUNC: this symlink's target was overwritten
  // with the shard, and the symlink then renamed into the shard's place.
  const fs::path planted = dir / "out" / "data-00000-of-00001.tfrecord.tmp";
  fs::create_symlink(dir / "victim", planted);
  ConvertOptions o;
  o.output_dir = dir.file("out");
  ConvertSummary s = convert(NumberedSource(5), o);
  ASSERT_EQ(s.shards.size(), 1u);
  EXPECT_EQ(testing::read_file(dir / "victim"), "precious");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(planted)));
  std::error_code ec;
  EXPECT_EQ(fs::read_symlink(planted, ec), dir / "victim") << ec.message();
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(s.shards[0].path)));
  EXPECT_EQ(records_in(s.shards[0].path).size(), 5u);
}

TEST(ShardOutput, WriteIndexReplacesAFileButNotASymlink) {
  TempDir dir;
  const std::vector<IndexEntry> entries{{0, 19}, {19, 21}};
  write_index(dir.file("a.idx"), entries);
  write_index(dir.file("a.idx"), {{0, 19}});  // replaced, not appended to
  ASSERT_EQ(read_index(dir.file("a.idx")).size(), 1u);

  testing::write_file(dir / "victim", "precious");
  fs::create_symlink(dir / "victim", dir / "b.idx");
  try {
    write_index(dir.file("b.idx"), entries);
    FAIL() << "wrote the index through a symlink";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tfrecord index: the output"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(testing::read_file(dir / "victim"), "precious");
  EXPECT_EQ(temporaries_in(dir.path()), std::vector<std::string>{});
}

}  // namespace
}  // namespace tandem::data
