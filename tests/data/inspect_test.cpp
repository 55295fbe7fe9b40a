// inspect's report and its JSON: valid JSON with the issue's conventions, and damaged files
// reported with message, offset and record.
#include <google/protobuf/util/json_util.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "data/example.h"
#include "data/inspect.h"
#include "data/tfrecord_writer.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

google::protobuf::Struct parse_json(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok()) << text;
  return s;
}

TEST(Inspect, JsonFollowsTheConventions) {
  testing::TempDir tmp;
  std::string path = tmp.file("a.tfrecord.gz");
  {
    TFRecordWriterOptions o;
    o.compression = Compression::kGzip;
    TFRecordWriter w(path, o);
    w.write(serialize_example({{"i", Feature::of_ints({7, -9000000000})}, {"b", Feature::of_bytes({"hi"})},
                               {"f", Feature::of_floats({NAN, std::numeric_limits<float>::infinity(), 0.5f})}}));
    w.write(serialize_example({{"i", Feature::of_ints({3})}}));
  }
  InspectOptions options;
  options.dump = -1;
  FileReport report = inspect_file(path, options);
  EXPECT_FALSE(report.damaged());
  google::protobuf::Struct doc = parse_json(render_json({report}));
  const auto& file = doc.fields().at("files").list_value().values(0).struct_value().fields();
  EXPECT_EQ(file.at("compression").string_value(), "gzip");
  EXPECT_EQ(file.at("num_records").number_value(), 2);
  EXPECT_EQ(file.at("kind").string_value(), "Example");
  EXPECT_TRUE(file.at("error").has_null_value());
  const auto& i = file.at("features").struct_value().fields().at("i").struct_value().fields();
  EXPECT_EQ(i.at("records_with_key").number_value(), 2);
  EXPECT_EQ(i.at("values").number_value(), 3);
  EXPECT_EQ(i.at("min").string_value(), "-9000000000");
  EXPECT_EQ(i.at("max").string_value(), "7");
  const auto& rec = file.at("records").list_value().values(0).struct_value().fields().at("features").struct_value().fields();
  EXPECT_EQ(rec.at("i").struct_value().fields().at("values").list_value().values(1).string_value(), "-9000000000");
  EXPECT_EQ(rec.at("b").struct_value().fields().at("values").list_value().values(0).string_value(), "aGk=");
  const auto& f = rec.at("f").struct_value().fields().at("values").list_value();
  EXPECT_EQ(f.values(0).string_value(), "NaN");
  EXPECT_EQ(f.values(1).string_value(), "Infinity");
  EXPECT_EQ(f.values(2).number_value(), 0.5);
  EXPECT_NE(render_text(report).find("compression: gzip  records: 2  kind: Example"), std::string::npos);
}

// One line of compact JSON, floats as their shortest float32 text, and text that is not UTF-8
// (a file name here) printed with U+FFFD instead of making the report throw.
TEST(Inspect, JsonIsOneLineWithShortFloatsAndSurvivesBadUtf8) {
  testing::TempDir tmp;
  std::string path = tmp.file("a.tfrecord");
  {
    TFRecordWriter w(path, {});
    w.write(serialize_example({{"f", Feature::of_floats({0.1f, -0.0f})}}));
  }
  InspectOptions options;
  options.dump = -1;
  std::string json = render_json({inspect_file(path, options)});
  EXPECT_EQ(json.find('\n'), json.size() - 1) << json;
  EXPECT_NE(json.find(R"("f":{"type":"float","values":[0.1,-0.0]})"), std::string::npos) << json;
  FileReport bad;
  bad.path = "bad\xff.tfrecord";
  EXPECT_NE(render_json({bad}).find("\"path\":\"bad\xef\xbf\xbd.tfrecord\""), std::string::npos);
}

TEST(Inspect, DamagedAndForeignFiles) {
  testing::TempDir tmp;
  std::string path = tmp.file("cut.tfrecord");
  std::string bytes = frame_record(serialize_example({{"x", Feature::of_ints({1})}})) + frame_record("zzzzzzzz");
  size_t first = bytes.size() - 24;
  testing::write_file(path, bytes.substr(0, bytes.size() - 3));
  FileReport report = inspect_file(path, {});
  ASSERT_TRUE(report.damaged());
  EXPECT_EQ(report.error->offset, first);
  EXPECT_EQ(report.error->record, 1u);
  EXPECT_EQ(report.num_records, 1u);
  auto doc = parse_json(render_json({report}));
  const auto& error = doc.fields().at("files").list_value().values(0).struct_value().fields().at("error").struct_value();
  EXPECT_EQ(error.fields().at("offset").number_value(), first);
  EXPECT_EQ(error.fields().at("message").string_value().rfind(fmt::format("truncated record at {}", first), 0), 0u);

  // Intact framing around a payload that is no tf.Example: "other", damage only under --verify.
  std::string foreign = tmp.file("foreign.tfrecord");
  testing::write_file(foreign, frame_record(std::string("\x0a\x05\x0a\x03", 4)));
  EXPECT_FALSE(inspect_file(foreign, {}).damaged());
  EXPECT_EQ(inspect_file(foreign, {}).kind(), "other");
  InspectOptions verify;
  verify.verify = true;
  FileReport strict = inspect_file(foreign, verify);
  ASSERT_TRUE(strict.damaged());
  EXPECT_EQ(strict.error->record, 0u);
  EXPECT_EQ(strict.error->offset, 0u);
  EXPECT_TRUE(inspect_file(tmp.file("missing"), {}).damaged());
}

}  // namespace
}  // namespace tandem::data
