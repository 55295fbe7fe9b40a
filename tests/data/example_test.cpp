// tf.Example / SequenceExample: round trips of every feature kind, packed and unpacked
// repeated values, a Feature with no kind, and the fast parser against protobuf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "data/example.h"
#include "data/example_fast.h"
#include "data/example_stats.h"
#include "data/tfrecord_reader.h"
#include "data/tfrecord_writer.h"
#include "engine/core/error.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

FeatureMap all_kinds() {
  FeatureMap f;
  f["bytes"] = Feature::of_bytes({"", "abc", std::string("\0\xff", 2)});
  f["floats"] = Feature::of_floats({0.5f, -1.25f, std::numeric_limits<float>::infinity(), 3e38f});
  f["ints"] = Feature::of_ints({0, -1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()});
  f["empty_ints"] = Feature::of_ints({});
  f["none"] = Feature{};
  return f;
}

TEST(Example, RoundTripsEveryFeatureKindThroughEveryCompression) {
  testing::TempDir tmp;
  ParsedRecord sequence;
  sequence.kind = MessageKind::kSequenceExample;
  sequence.features = {{"ctx", Feature::of_ints({7})}};
  sequence.feature_lists["steps"] = {Feature::of_bytes({"a"}), Feature::of_floats({1, 2}), Feature{}};
  for (Compression c : {Compression::kNone, Compression::kGzip, Compression::kZlib}) {
    std::string path = tmp.file("e" + std::string(compression_name(c)));
    {
      TFRecordWriterOptions o;
      o.compression = c;
      TFRecordWriter w(path, o);
      w.write(serialize_example(all_kinds()));
      w.write(serialize_record(sequence));
    }
    TFRecordReader reader(path);
    std::string_view r;
    ASSERT_TRUE(reader.next(&r));
    ParsedRecord example = parse_record(r);
    EXPECT_EQ(example.kind, MessageKind::kExample);
    EXPECT_EQ(example.features, all_kinds());
    EXPECT_EQ(parse_example(r), all_kinds());
    ASSERT_TRUE(reader.next(&r));
    ParsedRecord seq = parse_record(r);
    EXPECT_EQ(seq.kind, MessageKind::kSequenceExample);
    EXPECT_EQ(seq.features, sequence.features);
    EXPECT_EQ(seq.feature_lists, sequence.feature_lists);
    EXPECT_FALSE(reader.next(&r));
  }
}

// Hand-written wire bytes: protobuf encoders always pack, but readers must accept unpacked.
std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string len_field(int field, const std::string& body) { return varint(uint64_t(field) << 3 | 2) + varint(body.size()) + body; }
std::string entry(const std::string& key, const std::string& feature) { return len_field(1, len_field(1, key) + len_field(2, feature)); }

std::string unpacked_example() {
  std::string floats;
  for (float f : {1.5f, -2.0f}) {
    floats += varint(1 << 3 | 5);
    floats.append(reinterpret_cast<const char*>(&f), 4);
  }
  std::string ints;
  for (int64_t v : {int64_t{3}, int64_t{-4}}) ints += varint(1 << 3 | 0) + varint(static_cast<uint64_t>(v));
  std::string features = entry("f", len_field(2, floats)) + entry("i", len_field(3, ints)) + entry("n", "");
  return len_field(1, features);
}

TEST(Example, UnpackedRepeatedValuesAndKindlessFeaturesParse) {
  FeatureMap want = {{"f", Feature::of_floats({1.5f, -2.0f})}, {"i", Feature::of_ints({3, -4})}, {"n", Feature{}}};
  std::string payload = unpacked_example();
  EXPECT_EQ(parse_example(payload), want);
  FastExampleParser fast({"f", "i", "n", "missing"});
  fast.parse(payload);
  EXPECT_EQ(fast.feature(0).to_feature(), want["f"]);
  EXPECT_EQ(fast.feature(1).to_feature(), want["i"]);
  EXPECT_TRUE(fast.feature(2).present);
  EXPECT_EQ(fast.feature(2).type, FeatureType::kNone);
  EXPECT_FALSE(fast.feature(3).present);
}

TEST(Example, FastParserFollowsProtobufOnRepeatsAndDuplicates) {
  // The same key twice: the later entry wins. A oneof set twice: the last kind wins.
  std::string ints = len_field(3, len_field(1, varint(5)));
  std::string floats = len_field(2, len_field(1, std::string("\0\0\x80\x3f", 4)));
  std::string payload = len_field(1, entry("k", ints) + entry("k", floats) + entry("m", floats + ints));
  FeatureMap full = parse_example(payload);
  FastExampleParser fast({"k", "m"});
  fast.parse(payload);
  EXPECT_EQ(fast.feature(0).to_feature(), full["k"]);
  EXPECT_EQ(fast.feature(1).to_feature(), full["m"]);
  EXPECT_EQ(full["m"].type, FeatureType::kInt64);
}

TEST(Example, FastParserTakesEmptyPackedListsOfEveryKind) {
  // An empty packed float list once reached memcpy with a null destination (UBSan, found by
  // example_fuzz): an empty list must parse to no values, like protobuf's parser.
  std::string payload = len_field(1, entry("f", len_field(2, len_field(1, ""))) + entry("i", len_field(3, len_field(1, ""))) +
                                         entry("b", len_field(1, "")));
  FeatureMap full = parse_example(payload);
  FastExampleParser fast({"f", "i", "b"});
  fast.parse(payload);
  EXPECT_EQ(fast.feature(0).to_feature(), full["f"]);
  EXPECT_EQ(fast.feature(0).type, FeatureType::kFloat);
  EXPECT_EQ(fast.feature(0).size(), 0u);
  EXPECT_EQ(fast.feature(1).to_feature(), full["i"]);
  EXPECT_EQ(fast.feature(2).to_feature(), full["b"]);
}

TEST(Example, MalformedBytesAreDataLossNotCrashes) {
  for (std::string bad : {std::string("\x0a\x05\x0a\x03", 4), std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),
                          std::string("\x08", 1)}) {
    EXPECT_THROW(parse_record(bad), Error);
    FastExampleParser fast({"x"});
    EXPECT_THROW(fast.parse(bad), Error);
  }
  try {
    parse_record(std::string("\x0a\x05\x0a\x03", 4));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("not a tf.Example"), std::string::npos);
  }
}

TEST(ExampleStats, CountsTypesValuesAndRanges) {
  FileStats stats;
  ParsedRecord a;
  a.features = {{"x", Feature::of_floats({1, NAN, -3})}, {"y", Feature::of_ints({5})}};
  ParsedRecord b;
  b.features = {{"x", Feature{}}, {"y", Feature::of_ints({-7, 9})}};
  stats.add(a);
  stats.add(b);
  const KeyStats& x = stats.features.at("x");
  EXPECT_EQ(x.records_with_key, 2u);
  EXPECT_EQ(x.values, 3u);
  EXPECT_EQ(x.float_nan, 1u);
  EXPECT_EQ(x.float_min, -3);
  EXPECT_EQ(x.float_max, 1);
  EXPECT_EQ(x.types, (std::set<FeatureType>{FeatureType::kNone, FeatureType::kFloat}));
  const KeyStats& y = stats.features.at("y");
  EXPECT_EQ(int128_to_string(y.int_sum), "7");
  EXPECT_EQ(y.int_min, -7);
  EXPECT_EQ(y.int_max, 9);
  EXPECT_EQ(stats.kind_name(), "Example");
}

}  // namespace
}  // namespace tandem::data
