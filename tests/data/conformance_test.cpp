// Every file of ../shared/conformance/tfrecord against its manifest.json entry: valid files
// give the stated records, payload hash, first record and per-key statistics; damaged files
// give their error at the stated offset after the stated number of intact records.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "data/example.h"
#include "data/example_fast.h"
#include "data/example_stats.h"
#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
using testing::conformance_dir;

const Value& field(const Struct& s, const std::string& key) {
  static const Value kNull;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kNull : it->second;
}

// Reads a file to the end or to its first fault; hashes what it delivered.
struct ReadOutcome {
  uint64_t records = 0;
  uint64_t payload_bytes = 0;
  std::string payloads_sha256;
  std::vector<ParsedRecord> first;  // record 0, when there is one
  FileStats stats;
  std::optional<RecordFault> fault;
  std::string compression;
  std::string parse_error;
};

ReadOutcome read_all(const std::string& path, bool parse) {
  ReadOutcome out;
  TFRecordReader reader(path);
  out.compression = std::string(compression_name(reader.compression()));
  testing::Sha256 sha;
  std::string_view record;
  try {
    while (reader.next(&record)) {
      uint64_t n = record.size();
      sha.update(&n, 8);
      sha.update(record.data(), record.size());
      out.payload_bytes += n;
      ++out.records;
      if (!parse || !out.parse_error.empty()) continue;
      try {
        ParsedRecord parsed = parse_record(record);
        out.stats.add(parsed);
        if (out.first.empty()) out.first.push_back(std::move(parsed));
      } catch (const Error& e) {
        out.parse_error = e.what();
      }
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
    out.fault = reader.fault();
    EXPECT_TRUE(out.fault.has_value());
  }
  out.payloads_sha256 = sha.hex();
  return out;
}

void expect_feature(const Feature& got, const Struct& want, const std::string& key) {
  SCOPED_TRACE("feature " + key);
  EXPECT_EQ(feature_type_name(got.type), field(want, "type").string_value());
  if (got.type == FeatureType::kBytes) {
    const ListValue& values = field(want, "values_b64").list_value();
    ASSERT_EQ(got.bytes.size(), static_cast<size_t>(values.values_size()));
    for (int i = 0; i < values.values_size(); ++i) {
      const Value& v = values.values(i);
      if (v.has_struct_value()) {  // a long value: its length and hash
        EXPECT_EQ(got.bytes[i].size(), static_cast<size_t>(field(v.struct_value(), "len").number_value()));
        EXPECT_EQ(testing::sha256_hex(got.bytes[i]), field(v.struct_value(), "sha256").string_value());
      } else {
        EXPECT_EQ(got.bytes[i], testing::base64_decode(v.string_value()));
      }
    }
    return;
  }
  // Long lists come as their length and first 50 values.
  bool long_list = want.fields().count("len") > 0;
  const ListValue& values = field(want, long_list ? "first_50" : "values").list_value();
  if (long_list) {
    ASSERT_EQ(got.size(), static_cast<size_t>(field(want, "len").number_value()));
  } else {
    ASSERT_EQ(got.size(), static_cast<size_t>(values.values_size()));
  }
  for (int i = 0; i < values.values_size(); ++i) {
    if (got.type == FeatureType::kFloat) {
      const Value& v = values.values(i);
      if (v.has_string_value()) {
        EXPECT_TRUE(std::isnan(got.floats[i]) || std::isinf(got.floats[i])) << v.string_value();
      } else {
        EXPECT_EQ(static_cast<double>(got.floats[i]), v.number_value());
      }
    } else {
      EXPECT_EQ(std::to_string(got.ints[i]), values.values(i).string_value());
    }
  }
}

void expect_first_record(const ParsedRecord& got, const Struct& want) {
  EXPECT_EQ(message_kind_name(got.kind), field(want, "kind").string_value());
  const Struct& features = field(want, "features").struct_value();
  EXPECT_EQ(got.features.size(), static_cast<size_t>(features.fields_size()));
  for (const auto& [key, value] : features.fields()) {
    auto it = got.features.find(key);
    ASSERT_NE(it, got.features.end()) << key;
    expect_feature(it->second, value.struct_value(), key);
  }
  const Struct& lists = field(want, "feature_lists").struct_value();
  EXPECT_EQ(got.feature_lists.size(), static_cast<size_t>(lists.fields_size()));
  for (const auto& [key, value] : lists.fields()) {
    auto it = got.feature_lists.find(key);
    ASSERT_NE(it, got.feature_lists.end()) << key;
    EXPECT_EQ(it->second.size(), static_cast<size_t>(field(value.struct_value(), "steps").number_value()));
    const ListValue& steps = field(value.struct_value(), "first_3_steps").list_value();
    for (int i = 0; i < steps.values_size() && i < static_cast<int>(it->second.size()); ++i) {
      expect_feature(it->second[i], steps.values(i).struct_value(), key + "[" + std::to_string(i) + "]");
    }
  }
}

void expect_key_stats(const KeyStats& got, const Struct& want, const std::string& key) {
  SCOPED_TRACE("stats of " + key);
  std::vector<std::string> types;
  for (FeatureType t : got.types) types.emplace_back(feature_type_name(t));
  std::sort(types.begin(), types.end());
  std::vector<std::string> want_types;
  for (const Value& v : field(want, "types").list_value().values()) want_types.push_back(v.string_value());
  std::sort(want_types.begin(), want_types.end());
  EXPECT_EQ(types, want_types);
  EXPECT_EQ(got.records_with_key, field(want, "records_with_key").number_value());
  EXPECT_EQ(got.values, field(want, "values").number_value());
  if (want.fields().count("steps")) {
    EXPECT_EQ(got.steps, field(want, "steps").number_value());
  }
  if (want.fields().count("bytes_total_len")) {
    EXPECT_EQ(got.bytes_total_len, field(want, "bytes_total_len").number_value());
  }
  if (want.fields().count("float_fsum")) {
    double expected = field(want, "float_fsum").number_value();
    EXPECT_NEAR(got.float_fsum(), expected, 1e-9 * std::max(1.0, std::fabs(expected)));
    EXPECT_EQ(got.float_nan, field(want, "float_nan").number_value());
    if (field(want, "min").has_number_value()) {
      EXPECT_EQ(got.float_min, field(want, "min").number_value());
      EXPECT_EQ(got.float_max, field(want, "max").number_value());
    }
  }
  if (want.fields().count("int64_sum")) {
    EXPECT_EQ(int128_to_string(got.int_sum), field(want, "int64_sum").string_value());
    if (field(want, "min").has_string_value()) {
      EXPECT_EQ(std::to_string(got.int_min), field(want, "min").string_value());
      EXPECT_EQ(std::to_string(got.int_max), field(want, "max").string_value());
    }
  }
}

void expect_stats(const FileStats& got, const Struct& want) {
  const Struct& features = field(want, "features").struct_value();
  EXPECT_EQ(got.features.size(), static_cast<size_t>(features.fields_size()));
  for (const auto& [key, value] : features.fields()) {
    auto it = got.features.find(key);
    ASSERT_NE(it, got.features.end()) << key;
    expect_key_stats(it->second, value.struct_value(), key);
  }
  const Struct& lists = field(want, "feature_lists").struct_value();
  EXPECT_EQ(got.feature_lists.size(), static_cast<size_t>(lists.fields_size()));
  for (const auto& [key, value] : lists.fields()) {
    auto it = got.feature_lists.find(key);
    ASSERT_NE(it, got.feature_lists.end()) << key;
    expect_key_stats(it->second, value.struct_value(), key);
  }
}

class Conformance : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = conformance_dir();
    if (!dir) GTEST_SKIP() << testing::kNoCorpus;
    dir_ = *dir;
    manifest_ = testing::load_manifest(dir_);
  }
  std::vector<Struct> files(const std::string& role) const {
    std::vector<Struct> out;
    for (const Value& v : field(manifest_, "files").list_value().values()) {
      if (field(v.struct_value(), "role").string_value() == role) out.push_back(v.struct_value());
    }
    return out;
  }
  std::filesystem::path dir_;
  Struct manifest_;
};

TEST_F(Conformance, ValidFilesReadAsTheManifestSays) {
  std::vector<Struct> valid = files("valid");
  ASSERT_GE(valid.size(), 30u);
  for (const Struct& entry : valid) {
    const std::string name = field(entry, "file").string_value();
    SCOPED_TRACE(name);
    ReadOutcome got = read_all((dir_ / name).string(), true);
    ASSERT_FALSE(got.fault.has_value()) << got.fault->message;
    EXPECT_EQ(got.parse_error, "");
    EXPECT_EQ(got.compression, field(entry, "compression").string_value());
    EXPECT_EQ(got.records, field(entry, "num_records").number_value());
    EXPECT_EQ(got.payload_bytes, field(entry, "payload_bytes_total").number_value());
    EXPECT_EQ(got.payloads_sha256, field(entry, "payloads_sha256").string_value());
    if (entry.fields().count("first_record")) {
      ASSERT_EQ(got.first.size(), 1u);
      expect_first_record(got.first[0], field(entry, "first_record").struct_value());
    }
    if (entry.fields().count("stats_all_records")) expect_stats(got.stats, field(entry, "stats_all_records").struct_value());
    for (const Value& kind : field(entry, "message_kinds").list_value().values()) {
      EXPECT_EQ(got.stats.kind_name(), kind.string_value());
    }
  }
}

TEST_F(Conformance, DamagedFilesGiveTheirErrorAtTheRightOffset) {
  std::vector<Struct> negative = files("negative");
  ASSERT_GE(negative.size(), 7u);
  for (const Struct& entry : negative) {
    const std::string name = field(entry, "file").string_value();
    SCOPED_TRACE(name);
    const Struct& expected = field(entry, "expected_error").struct_value();
    const std::string kind = field(expected, "kind").string_value();
    ReadOutcome got = read_all((dir_ / name).string(), kind == "bad_proto");
    EXPECT_EQ(got.compression, field(entry, "compression").string_value());
    if (kind == "bad_proto") {  // framing is fine; the payloads are not tf.Example
      EXPECT_FALSE(got.fault.has_value());
      EXPECT_EQ(got.records, field(entry, "records_read_before_error").number_value());
      EXPECT_NE(got.parse_error.find("not a tf.Example"), std::string::npos) << got.parse_error;
      continue;
    }
    ASSERT_TRUE(got.fault.has_value()) << "no error from a damaged file";
    if (field(expected, "layer").string_value() == "compression") {
      EXPECT_EQ(got.fault->kind, RecordFault::Kind::kCompression) << got.fault->message;
      continue;
    }
    uint64_t offset = static_cast<uint64_t>(field(expected, "offset").number_value());
    uint64_t records_before = static_cast<uint64_t>(field(entry, "records_read_before_error").number_value());
    EXPECT_EQ(got.records, records_before);
    EXPECT_EQ(got.fault->record, static_cast<uint64_t>(field(expected, "record_index").number_value()));
    EXPECT_EQ(got.payloads_sha256, field(entry, "payloads_sha256").string_value());
    std::string want;
    if (kind == "data_crc_mismatch") {
      want = fmt::format("corrupted record at {} ", offset + 12);  // TensorFlow reports the data's offset
    } else if (kind == "length_crc_mismatch") {
      want = fmt::format("corrupted record at {} ", offset);
    } else {
      want = fmt::format("truncated record at {} ", offset);
    }
    EXPECT_EQ(got.fault->message.rfind(want, 0), 0u) << got.fault->message << " vs " << want;
    EXPECT_NE(got.fault->message.find(name), std::string::npos) << "the message names the file";
    EXPECT_NE(got.fault->message.find(fmt::format("(record {})", got.fault->record)), std::string::npos);
  }
}

// The fast path must see exactly what protobuf sees, on every Example in the corpus.
TEST_F(Conformance, FastParserAgreesWithProtobuf) {
  size_t compared = 0;
  for (const Struct& entry : files("valid")) {
    const std::string name = field(entry, "file").string_value();
    SCOPED_TRACE(name);
    TFRecordReader reader((dir_ / name).string());
    std::string_view record;
    while (reader.next(&record)) {
      ParsedRecord full = parse_record(record);
      if (full.kind != MessageKind::kExample) break;
      std::vector<std::string> keys;
      for (const auto& kv : full.features) keys.push_back(kv.first);
      keys.push_back("no/such/key");
      FastExampleParser fast(keys);
      fast.parse(record);
      for (size_t i = 0; i + 1 < keys.size(); ++i) {
        ASSERT_TRUE(fast.feature(i).present);
        ASSERT_EQ(fast.feature(i).to_feature(), full.features.at(keys[i])) << keys[i];
      }
      ASSERT_FALSE(fast.feature(keys.size() - 1).present);
      ++compared;
    }
  }
  EXPECT_GT(compared, 5000u);
}

TEST_F(Conformance, StatedCompressionThatDisagreesStillReadsAsStated) {
  // A gzip file read as "none" is not guessed into working: it fails as TensorFlow would.
  TFRecordReaderOptions options;
  options.compression = Compression::kNone;
  TFRecordReader reader((dir_ / "google-yggdrasil-decision-forests/toy.tfe-tfrecord-00000-of-00002").string(), options);
  std::string_view record;
  EXPECT_THROW(reader.next(&record), Error);
}

}  // namespace
}  // namespace tandem::data
