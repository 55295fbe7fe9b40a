// convert --source text: the window plan, UTF-8 counting, inputs, and whole conversions of a text
// written here, read back window by window against the bytes they were cut from.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/convert/text.h"
#include "data/example.h"
#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

// The error's message when fn throws tandem::Error with `code`; fails the test otherwise.
template <typename F>
std::string error_of(F fn, ErrorCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// Every window of a split's shards, shard by shard, as the strings of bytes they hold.
std::vector<std::string> windows_in(const TextSplitSummary& split) {
  std::vector<std::string> out;
  for (const ShardInfo& shard : split.files.shards) {
    TFRecordReader reader(shard.path);
    std::string_view record;
    while (reader.next(&record)) {
      FeatureMap f = parse_example(record);
      EXPECT_EQ(f.size(), 1u);
      std::string bytes;
      for (int64_t t : f.at("tokens").ints) {
        EXPECT_TRUE(t >= 0 && t < 256) << t;
        bytes += static_cast<char>(t);
      }
      out.push_back(bytes);
    }
  }
  return out;
}

// A text with every byte value in it, so that tokens above 127 must come out as 128..255.
std::string sample_text(size_t n) {
  std::string text;
  for (size_t i = 0; i < n; ++i) text += static_cast<char>((i * 37 + i / 7) % 256);
  return text;
}

TEST(TextConvert, PlanCutsWindowsAndPutsValidationAtTheEnd) {
  TextSplitPlan p = plan_text_windows(100, 8, 0, 0.2);
  EXPECT_EQ(p.train.first_byte, 0u);
  EXPECT_EQ(p.train.bytes, 80u);
  EXPECT_EQ(p.train.length, 9u);
  EXPECT_EQ(p.train.stride, 8u);  // stride 0: the block size, so windows share one token
  EXPECT_EQ(p.train.count, 9u);   // starts 0, 8, ..., 64; the last ends at 73
  EXPECT_EQ(p.train.unused_bytes(), 7u);
  EXPECT_EQ(p.train.tokens(), 81u);
  EXPECT_EQ(p.val.first_byte, 80u);
  EXPECT_EQ(p.val.bytes, 20u);
  EXPECT_EQ(p.val.count, 2u);  // starts 80, 88
  EXPECT_EQ(p.val.unused_bytes(), 3u);

  TextSplitPlan dense = plan_text_windows(100, 8, 1, 0.0);
  EXPECT_EQ(dense.train.count, 92u);
  EXPECT_EQ(dense.val.count, 0u);
  EXPECT_EQ(dense.train.bytes, 100u);
  EXPECT_EQ(plan_text_windows(9, 8, 0, 0.0).train.count, 1u);  // exactly one window
}

TEST(TextConvert, PlanErrorsSayWhatIsNeeded) {
  EXPECT_NE(error_of([] { plan_text_windows(100, 0, 0, 0.1); }, ErrorCode::kInvalidArgument).find("at least 1"),
            std::string::npos);
  EXPECT_NE(error_of([] { plan_text_windows(100, 8, 10, 0.1); }, ErrorCode::kInvalidArgument).find("[1, block size"),
            std::string::npos);
  error_of([] { plan_text_windows(100, 8, 0, 1.0); }, ErrorCode::kInvalidArgument);
  error_of([] { plan_text_windows(100, 8, 0, -0.1); }, ErrorCode::kInvalidArgument);
  std::string short_text = error_of([] { plan_text_windows(8, 8, 0, 0.0); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(short_text.find("8 bytes, fewer than one window of block size 8 + 1 = 9 bytes"), std::string::npos)
      << short_text;
  std::string no_val = error_of([] { plan_text_windows(40, 8, 0, 0.1); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(no_val.find("validation split (0.1 of 40 bytes = 4 bytes at the end)"), std::string::npos) << no_val;
  EXPECT_NE(no_val.find("at least 0.2250"), std::string::npos) << no_val;
  std::string no_train = error_of([] { plan_text_windows(20, 8, 0, 0.6); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(no_train.find("leaves 8 bytes for training"), std::string::npos) << no_train;
  EXPECT_NE(no_train.find("at most 0.5500"), std::string::npos) << no_train;
}

TEST(TextConvert, CountsBytesThatAreNotUtf8) {
  EXPECT_EQ(count_invalid_utf8("plain ASCII"), 0u);
  EXPECT_EQ(count_invalid_utf8("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"), 0u);  // é, €, an emoji
  EXPECT_EQ(count_invalid_utf8("\xff"), 1u);
  EXPECT_EQ(count_invalid_utf8("a\xe2\x82" "b"), 2u);  // a cut three-byte sequence
  EXPECT_EQ(count_invalid_utf8("\xc0\xaf"), 2u);       // overlong '/'
  EXPECT_EQ(count_invalid_utf8("\xed\xa0\x80"), 3u);   // a UTF-16 surrogate
  EXPECT_EQ(count_invalid_utf8("\xf4\x90\x80\x80"), 4u);  // past U+10FFFF
}

TEST(TextConvert, WindowsInTextOrderWithValidationFromTheEnd) {
  testing::TempDir tmp;
  const std::string text = sample_text(1000);
  testing::write_file(tmp.file("a.txt"), text);
  TextConvertOptions o;
  o.inputs = {tmp.file("a.txt")};
  o.block_size = 16;
  o.validation_fraction = 0.1;
  o.convert.output_dir = tmp.file("out");
  o.convert.min_shards = 3;
  TextConvertSummary s = convert_text(o);
  EXPECT_EQ(s.text_bytes, 1000u);
  EXPECT_EQ(s.block_size, 16);
  ASSERT_TRUE(s.val.has_value());
  EXPECT_EQ(s.train.windows.bytes, 900u);
  EXPECT_EQ(s.train.windows.count, 56u);  // (900 - 17) / 16 + 1
  EXPECT_EQ(s.val->windows.first_byte, 900u);
  EXPECT_EQ(s.val->windows.count, 6u);  // (100 - 17) / 16 + 1
  ASSERT_EQ(s.train.files.shards.size(), 3u);
  EXPECT_EQ(s.val->files.shards.size(), 3u);
  EXPECT_NE(s.train.files.shards[0].path.find("train-00000-of-00003.tfrecord"), std::string::npos);
  EXPECT_NE(s.val->files.shards[2].path.find("val-00002-of-00003.tfrecord"), std::string::npos);
  EXPECT_EQ(s.train.files.shards[0].records, 19u);  // 56 = 19 + 19 + 18, in order
  EXPECT_EQ(s.train.files.shards[2].records, 18u);
  EXPECT_TRUE(s.train.files.records_per_class.empty());

  // Without a seed the shards hold consecutive runs: reading them in order gives the text's windows.
  std::vector<std::string> train = windows_in(s.train);
  ASSERT_EQ(train.size(), 56u);
  for (size_t i = 0; i < train.size(); ++i) EXPECT_EQ(train[i], text.substr(i * 16, 17)) << "window " << i;
  std::vector<std::string> val = windows_in(*s.val);
  ASSERT_EQ(val.size(), 6u);
  for (size_t i = 0; i < val.size(); ++i) EXPECT_EQ(val[i], text.substr(900 + i * 16, 17)) << "window " << i;
  // Disjoint: the last training window ends before the validation part starts.
  EXPECT_LE((s.train.windows.count - 1) * 16 + 17, s.val->windows.first_byte);
}

TEST(TextConvert, SeedShufflesTrainingWindowsOverShards) {
  testing::TempDir tmp;
  const std::string text = sample_text(2000);
  testing::write_file(tmp.file("a.txt"), text);
  auto run = [&](const std::string& out, std::optional<uint64_t> seed) {
    TextConvertOptions o;
    o.inputs = {tmp.file("a.txt")};
    o.block_size = 8;
    o.stride = 4;  // overlapping windows
    o.validation_fraction = 0.25;
    o.shuffle_seed = seed;
    o.convert.output_dir = tmp.file(out);
    o.convert.min_shards = 2;
    return convert_text(o);
  };
  TextConvertSummary ordered = run("ordered", std::nullopt), a = run("a", 7), b = run("b", 7), c = run("c", 8);
  std::vector<std::string> in_order = windows_in(ordered.train), wa = windows_in(a.train);
  EXPECT_EQ(in_order.size(), (1500u - 9) / 4 + 1);
  EXPECT_NE(wa, in_order);
  EXPECT_EQ(wa, windows_in(b.train));  // the same seed, the same shards
  EXPECT_NE(wa, windows_in(c.train));
  std::sort(wa.begin(), wa.end());
  std::sort(in_order.begin(), in_order.end());
  EXPECT_EQ(wa, in_order);  // the same windows, in another order
  EXPECT_EQ(windows_in(*a.val), windows_in(*ordered.val));  // validation keeps text order
}

TEST(TextConvert, InputsAreConcatenatedInOrderAndGlobsSorted) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("b.txt"), "0123456789");
  testing::write_file(tmp.file("a.txt"), "abcdefghij");
  EXPECT_EQ(resolve_text_inputs({tmp.file("*.txt")}),
            (std::vector<std::string>{tmp.file("a.txt"), tmp.file("b.txt")}));
  EXPECT_EQ(read_text_files({tmp.file("b.txt"), tmp.file("a.txt")}), "0123456789abcdefghij");
  TextConvertOptions o;
  o.inputs = {tmp.file("b.txt"), tmp.file("a.txt")};
  o.block_size = 9;
  o.validation_fraction = 0.5;
  o.convert.output_dir = tmp.file("out");
  TextConvertSummary s = convert_text(o);
  EXPECT_EQ(windows_in(s.train), std::vector<std::string>{"0123456789"});
  EXPECT_EQ(windows_in(*s.val), std::vector<std::string>{"abcdefghij"});
}

TEST(TextConvert, BadInputsAreNamed) {
  testing::TempDir tmp;
  std::string missing = error_of([&] { read_text_files({tmp.file("nope.txt")}); }, ErrorCode::kNotFound);
  EXPECT_NE(missing.find(tmp.file("nope.txt")), std::string::npos) << missing;
  std::string no_match = error_of([&] { resolve_text_inputs({tmp.file("*.md")}); }, ErrorCode::kNotFound);
  EXPECT_NE(no_match.find("no file matches"), std::string::npos) << no_match;
  testing::write_file(tmp.file("empty.txt"), "");
  std::string empty = error_of([&] { read_text_files({tmp.file("empty.txt")}); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(empty.find("the text is empty"), std::string::npos) << empty;
  std::string folder = error_of([&] { read_text_files({tmp.path().string()}); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(folder.find("is a folder"), std::string::npos) << folder;

  testing::write_file(tmp.file("short.txt"), "too short");
  TextConvertOptions o;
  o.inputs = {tmp.file("short.txt")};
  o.block_size = 16;
  o.convert.output_dir = tmp.file("out");
  std::string short_text = error_of([&] { convert_text(o); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(short_text.find("9 bytes, fewer than one window of block size 16 + 1 = 17 bytes"), std::string::npos)
      << short_text;
  EXPECT_FALSE(fs::exists(tmp.file("out")));  // nothing written before the text was checked
  o.val_prefix = "train";
  error_of([&] { convert_text(o); }, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::data
