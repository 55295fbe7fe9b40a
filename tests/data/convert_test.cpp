// convert: shard planning and dealing, and each source end to end (IDX made here, CSV,
// an image folder with PNG and JPEG files), read back through the reader and parser.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/convert/convert.h"
#include "data/example.h"
#include "data/tfrecord_reader.h"
#include "engine/core/error.h"
#include "tests/data/test_util.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

std::vector<FeatureMap> read_shards(const ConvertSummary& summary) {
  std::vector<FeatureMap> out;
  for (const ShardInfo& shard : summary.shards) {
    TFRecordReader reader(shard.path);
    std::string_view r;
    uint64_t n = 0;
    while (reader.next(&r)) {
      out.push_back(parse_example(r));
      ++n;
    }
    EXPECT_EQ(n, shard.records) << shard.path;
    EXPECT_EQ(fs::file_size(shard.path), shard.bytes);
  }
  return out;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

TEST(Convert, ShardPlanAndSeededDeal) {
  ConvertOptions o;
  o.target_shard_bytes = 100;
  o.min_shards = 4;
  EXPECT_EQ(plan_shard_count(1000, 500, o), 10);
  EXPECT_EQ(plan_shard_count(10, 500, o), 4);
  EXPECT_EQ(plan_shard_count(1000, 3, o), 3);  // never an empty shard
  EXPECT_EQ(plan_shard_count(0, 0, o), 1);
  auto a = deal_records(103, 4, 7);
  EXPECT_EQ(a, deal_records(103, 4, 7));
  EXPECT_NE(a, deal_records(103, 4, 8));
  std::vector<size_t> all;
  for (const auto& shard : a) {
    EXPECT_GE(shard.size(), 25u);
    EXPECT_LE(shard.size(), 26u);
    all.insert(all.end(), shard.begin(), shard.end());
  }
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], i);
}

TEST(Convert, IdxFilesBecomeImageRecords) {
  testing::TempDir tmp;
  const int n = 50, h = 4, w = 3;
  std::string images = be32(0x803) + be32(n) + be32(h) + be32(w), labels = be32(0x801) + be32(n);
  for (int i = 0; i < n; ++i) {
    images += std::string(h * w, static_cast<char>(i));
    labels += static_cast<char>(i % 10);
  }
  testing::write_file(tmp.file("img.idx"), images);
  gzFile gz = gzopen(tmp.file("lbl.idx.gz").c_str(), "wb");  // a gzipped one too, as Debian ships them
  gzwrite(gz, labels.data(), static_cast<unsigned>(labels.size()));
  gzclose(gz);
  auto source = open_idx_source(tmp.file("img.idx"), tmp.file("lbl.idx.gz"));
  ConvertOptions o;
  o.output_dir = tmp.file("out");
  o.min_shards = 3;
  o.compression = Compression::kGzip;
  o.seed = 5;
  ConvertSummary s = convert(*source, o);
  ASSERT_EQ(s.shards.size(), 3u);
  EXPECT_EQ(s.records, 50u);
  EXPECT_EQ(s.records_per_class.at(3), 5u);
  EXPECT_NE(s.shards[0].path.find("data-00000-of-00003.tfrecord.gz"), std::string::npos);
  std::vector<FeatureMap> records = read_shards(s);
  ASSERT_EQ(records.size(), 50u);
  std::set<int> seen;
  for (const FeatureMap& f : records) {
    int first_pixel = static_cast<uint8_t>(f.at("image/encoded").bytes.at(0)[0]);
    EXPECT_EQ(f.at("image/class/label").ints.at(0), first_pixel % 10);
    EXPECT_EQ(f.at("image/encoded").bytes.at(0).size(), size_t(h * w));
    EXPECT_EQ(f.at("image/height").ints.at(0), h);
    EXPECT_EQ(f.at("image/width").ints.at(0), w);
    EXPECT_EQ(f.at("image/channels").ints.at(0), 1);
    EXPECT_EQ(f.at("image/format").bytes.at(0), "raw");
    seen.insert(first_pixel);
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_THROW(open_idx_source(tmp.file("lbl.idx.gz"), tmp.file("lbl.idx.gz")), Error);
}

// The error of open_idx_source(images, labels), or "" when it opens.
std::string idx_error(const std::string& images, const std::string& labels) {
  try {
    open_idx_source(images, labels);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Convert, AnIdxFileIsReadOnlyAsFarAsItsHeaderSays) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("lbl.idx"), be32(0x801) + be32(1) + std::string(1, '\3'));
  // A header of one 28x28 image, then 64 MiB of zeros: gzip makes them 64 KB. The whole inflated
  // stream was once read before the sizes were compared (2 GiB, then std::bad_alloc).
  gzFile gz = gzopen(tmp.file("img.idx.gz").c_str(), "wb");
  const std::string header = be32(0x803) + be32(1) + be32(28) + be32(28);
  gzwrite(gz, header.data(), static_cast<unsigned>(header.size()));
  const std::string zeros(1 << 20, '\0');
  for (int i = 0; i < 64; ++i) gzwrite(gz, zeros.data(), static_cast<unsigned>(zeros.size()));
  gzclose(gz);
  std::string e = idx_error(tmp.file("img.idx.gz"), tmp.file("lbl.idx"));
  EXPECT_NE(e.find("img.idx.gz: the header says 784 bytes of data, the file has more"), std::string::npos) << e;

  // Dimensions whose product overflows 64 bits, and a file shorter than its header says.
  testing::write_file(tmp.file("huge.idx"), be32(0x803) + be32(0xffffffff) + be32(0xffffffff) + be32(0xffffffff));
  e = idx_error(tmp.file("huge.idx"), tmp.file("lbl.idx"));
  EXPECT_NE(e.find("claim more than 1 TiB of data"), std::string::npos) << e;
  testing::write_file(tmp.file("short.idx"), be32(0x803) + be32(1) + be32(2) + be32(2) + "abc");
  e = idx_error(tmp.file("short.idx"), tmp.file("lbl.idx"));
  EXPECT_NE(e.find("the header says 4 bytes of data, the file has 3"), std::string::npos) << e;
}

TEST(Convert, RealFashionMnistWhenInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!fs::exists(dir + "t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto source = open_idx_source(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(source->size(), 10000u);
  FeatureMap f = parse_example(source->record(0));
  EXPECT_EQ(f.at("image/encoded").bytes.at(0).size(), 784u);
  EXPECT_EQ(f.at("image/class/label").ints.at(0), 9);  // the first test image is an ankle boot
}

TEST(Convert, CsvColumnsBecomeTypedFeatures) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("t.csv"),
                      "id,score,name,species\n1,0.5,\"a, b\",cat\n2,,\"say \"\"hi\"\"\",dog\n3,2,c,cat\r\n");
  CsvOptions options;
  options.label_column = "species";
  options.types["id"] = FeatureType::kFloat;
  auto source = open_csv_source(tmp.file("t.csv"), options);
  ASSERT_EQ(source->size(), 3u);
  FeatureMap r0 = parse_example(source->record(0));
  EXPECT_EQ(r0.at("id"), Feature::of_floats({1}));
  EXPECT_EQ(r0.at("score"), Feature::of_floats({0.5f}));
  EXPECT_EQ(r0.at("name"), Feature::of_bytes({"a, b"}));
  FeatureMap r1 = parse_example(source->record(1));
  EXPECT_EQ(r1.at("score").type, FeatureType::kNone);  // an empty cell
  EXPECT_EQ(r1.at("name"), Feature::of_bytes({"say \"hi\""}));
  EXPECT_EQ(source->label(1), 1);
  EXPECT_EQ(source->class_name(0), "cat");
  ConvertOptions o;
  o.output_dir = tmp.file("out");
  ConvertSummary s = convert(*source, o);
  EXPECT_EQ(s.records_per_class.at(0), 2u);
  EXPECT_EQ(read_shards(s).size(), 3u);
  options.label_column = "nope";
  EXPECT_THROW(open_csv_source(tmp.file("t.csv"), options), Error);
  testing::write_file(tmp.file("bad.csv"), "a,b\n1\n");
  options.label_column = "a";
  EXPECT_THROW(open_csv_source(tmp.file("bad.csv"), options), Error);
}

TEST(Convert, ACsvHeaderNamingAColumnTwiceIsRefused) {
  // Each column becomes the feature of its name: the second "x" silently replaced the first.
  testing::TempDir tmp;
  testing::write_file(tmp.file("dup.csv"), "x,label,x\n1,a,2\n3,b,4\n");
  CsvOptions options;
  options.label_column = "label";
  try {
    open_csv_source(tmp.file("dup.csv"), options);
    FAIL() << "a header with two columns named x was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("dup.csv: the header names column 'x' twice (columns 1 and 3)"),
              std::string::npos)
        << e.what();
  }
  testing::write_file(tmp.file("ok.csv"), "x,label,y\n1,a,2\n");
  EXPECT_EQ(open_csv_source(tmp.file("ok.csv"), options)->size(), 1u);
}

std::string png_header(uint32_t w, uint32_t h, uint8_t color_type) {
  std::string ihdr = "IHDR" + be32(w) + be32(h) + std::string{8, static_cast<char>(color_type), 0, 0, 0};
  uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(ihdr.data()), static_cast<uInt>(ihdr.size())));
  return std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + ihdr + be32(crc) + be32(0) + "IEND" + be32(0xae426082);
}

TEST(Convert, ShardsOfAnEarlierConvertAreAnErrorUnlessOverwritten) {
  testing::TempDir tmp;
  testing::write_file(tmp.file("t.csv"), "x,label\n1,a\n2,b\n3,a\n4,b\n");
  CsvOptions csv;
  csv.label_column = "label";
  auto source = open_csv_source(tmp.file("t.csv"), csv);
  ConvertOptions o;
  o.output_dir = tmp.file("out");
  o.min_shards = 3;
  o.compression = Compression::kNone;
  o.write_index = true;
  convert(*source, o);
  testing::write_file(tmp.file("out/other-00000-of-00001.tfrecord"), "");  // another prefix: not ours
  o.min_shards = 2;  // the earlier 3 shards would sit beside the new 2
  try {
    convert(*source, o);
    FAIL() << "converted beside the earlier shards";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("holds 6 file(s) of an earlier convert with prefix 'data' (first "
                                         "data-00000-of-00003.tfrecord)"),
              std::string::npos)
        << e.what();
  }
  o.overwrite = true;
  ConvertSummary s = convert(*source, o);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(tmp.file("out"))) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"data-00000-of-00002.tfrecord", "data-00000-of-00002.tfrecord.idx",
                                             "data-00001-of-00002.tfrecord", "data-00001-of-00002.tfrecord.idx",
                                             "other-00000-of-00001.tfrecord"}));
  EXPECT_EQ(s.records, 4u);
}

TEST(Convert, ImageFolderKeepsEncodedBytes) {
  testing::TempDir tmp;
  fs::create_directories(tmp.path() / "imgs" / "b_dog");
  fs::create_directories(tmp.path() / "imgs" / "a_cat");
  testing::write_file(tmp.path() / "imgs" / "a_cat" / "1.png", png_header(7, 5, 6));
  testing::write_file(tmp.path() / "imgs" / "b_dog" / "2.PNG", png_header(3, 9, 0));
  testing::write_file(tmp.path() / "imgs" / "b_dog" / "notes.txt", "ignored");
  std::string jpeg;
  if (auto corpus = testing::conformance_dir()) {  // a real JPEG from the corpus, when present
    TFRecordReader reader((*corpus / "jwata-sushi_detector_dataset/train.record").string());
    std::string_view r;
    if (reader.next(&r)) jpeg = parse_example(r).at("image/encoded").bytes.at(0);
    testing::write_file(tmp.path() / "imgs" / "b_dog" / "3.jpg", jpeg);
  }
  auto source = open_image_folder_source(tmp.file("imgs"));
  ASSERT_EQ(source->size(), jpeg.empty() ? 2u : 3u);
  EXPECT_EQ(source->class_name(1), "b_dog");
  FeatureMap cat = parse_example(source->record(0));
  EXPECT_EQ(cat.at("image/encoded").bytes.at(0), png_header(7, 5, 6));
  EXPECT_EQ(cat.at("image/format").bytes.at(0), "png");
  EXPECT_EQ(cat.at("image/width").ints.at(0), 7);
  EXPECT_EQ(cat.at("image/height").ints.at(0), 5);
  EXPECT_EQ(cat.at("image/channels").ints.at(0), 4);
  EXPECT_EQ(cat.at("image/class/label").ints.at(0), 0);
  FeatureMap dog = parse_example(source->record(1));
  EXPECT_EQ(dog.at("image/channels").ints.at(0), 1);
  EXPECT_EQ(dog.at("image/class/label").ints.at(0), 1);
  if (!jpeg.empty()) {
    FeatureMap photo = parse_example(source->record(2));
    EXPECT_EQ(photo.at("image/format").bytes.at(0), "jpeg");
    EXPECT_EQ(photo.at("image/width").ints.at(0), 640);  // as the manifest's JPEG header check says
    EXPECT_EQ(photo.at("image/height").ints.at(0), 480);
    EXPECT_EQ(photo.at("image/channels").ints.at(0), 3);
  }
  testing::write_file(tmp.path() / "imgs" / "a_cat" / "broken.jpg", "not a jpeg");
  auto broken = open_image_folder_source(tmp.file("imgs"));
  ConvertOptions o;
  o.output_dir = tmp.file("out");
  EXPECT_THROW(convert(*broken, o), Error);
}

}  // namespace
}  // namespace tandem::data
