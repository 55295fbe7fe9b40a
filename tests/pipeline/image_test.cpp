// Decoding and augmentation: JPEG and PNG round trips, scaled JPEG decoding, the random
// resized crop box, resize/flip/pad kernels, normalisation, and the record -> tensors map.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cmath>

#include "include/tandem/data.h"  // the public header, as a program outside the tree includes it
#include "data/example.h"
#include "data/pipeline/image_augment.h"
#include "data/pipeline/image_decode.h"
#include "data/pipeline/image_map.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

double mean_abs_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

TEST(PipelineImage, JpegRoundTripAndScaledDecode) {
  Image src = testing::synthetic_image(160, 120, 3, 1);
  std::string jpeg = encode_jpeg(src, 95);
  EXPECT_EQ(sniff_image_format(jpeg), ImageFormat::kJpeg);
  Image full;
  int num = 0, den = 0;
  decode_jpeg(jpeg, 3, 0, 0, &full, &num, &den);
  ASSERT_EQ(full.width, 160);
  EXPECT_EQ(num, den);
  EXPECT_LT(mean_abs_diff(full.pixels, src.pixels), 12.0);  // noise + 4:2:0 chroma
  Image half;
  decode_jpeg(jpeg, 3, 70, 50, &half, &num, &den);  // 1/2 still covers 70x50; 1/4 (40x30) would not
  EXPECT_EQ(half.width, 80);
  EXPECT_EQ(half.height, 60);
  EXPECT_EQ(num * 2, den);
  EXPECT_THROW(decode_jpeg(jpeg.substr(0, 3) + "not a jpeg", 3, 0, 0, &full, nullptr, nullptr), Error);
}

TEST(PipelineImage, PngRoundTripIsExact) {
  Image src = testing::synthetic_image(33, 17, 3, 2);
  std::string png = encode_png(src);
  EXPECT_EQ(sniff_image_format(png), ImageFormat::kPng);
  Image back;
  decode_png(png, 3, &back);
  EXPECT_EQ(back.pixels, src.pixels);
  EXPECT_THROW(decode_png("not a png", 3, &back), Error);
}

TEST(PipelineImage, RandomResizedCropBoxStaysInsideAndInRange) {
  Generator rng(3);
  RandomResizedCropRange range;
  for (int i = 0; i < 200; ++i) {
    CropBox b = random_resized_crop_box(500, 375, range, rng);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.width, 500);
    ASSERT_LE(b.y + b.height, 375);
    float area = b.width * b.height / (500.0f * 375.0f);
    ASSERT_GE(area, 0.07f);
    ASSERT_LE(area, 1.0f);
  }
  // A strip too thin for any try falls back to the central crop with a clamped ratio.
  CropBox b = random_resized_crop_box(1000, 10, RandomResizedCropRange{0.9f, 1.0f, 0.75f, 1.33f}, rng);
  EXPECT_FLOAT_EQ(b.height, 10);
  EXPECT_NEAR(b.width, 13, 1);
}

TEST(PipelineImage, ResizeIdentityFlipAndPadding) {
  Image src = testing::synthetic_image(8, 6, 3, 4);
  std::vector<uint8_t> out(src.pixels.size());
  resize_bilinear(src, {0, 0, 8, 6}, false, 8, 6, out.data());
  EXPECT_EQ(out, src.pixels);
  resize_bilinear(src, {0, 0, 8, 6}, true, 8, 6, out.data());
  for (int c = 0; c < 3; ++c) EXPECT_EQ(out[c], src.pixels[7 * 3 + c]);  // first pixel = last of row 0
  std::vector<uint8_t> padded(src.pixels.size());
  crop_with_padding(src, 2, 0, 0, false, padded.data());  // shifted right/down by 2
  EXPECT_EQ(padded[0], 0);
  EXPECT_EQ(padded[(2 * 8 + 2) * 3], src.pixels[0]);
  crop_with_padding(src, 2, 2, 2, false, padded.data());  // the centre: the image itself
  EXPECT_EQ(padded, src.pixels);
}

TEST(PipelineImage, DownscaleAveragesPlausibly) {
  Image flat;
  flat.width = 64;
  flat.height = 64;
  flat.channels = 1;
  flat.pixels.assign(64 * 64, 77);
  std::vector<uint8_t> out(16 * 16);
  resize_bilinear(flat, {8, 8, 40, 40}, false, 16, 16, out.data());
  for (uint8_t v : out) ASSERT_EQ(v, 77);
}

TEST(PipelineImage, NormalizeAndLayout) {
  std::vector<uint8_t> hwc{0, 255, 51, 255, 0, 102};  // 2 pixels, 3 channels
  std::vector<float> chw(6);
  normalize(hwc.data(), 2, 1, 3, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, true, chw.data());
  EXPECT_FLOAT_EQ(chw[0], -1.0f);  // channel 0, pixel 0
  EXPECT_FLOAT_EQ(chw[1], 1.0f);   // channel 0, pixel 1
  std::vector<uint8_t> planes(6);
  hwc_to_chw(hwc.data(), 2, 1, 3, planes.data());
  EXPECT_EQ(planes, (std::vector<uint8_t>{0, 255, 255, 0, 51, 102}));
}

TEST(PipelineImage, ImageMapDecodesAugmentsAndIsDeterministicPerRecord) {
  Element in;
  in.text = testing::image_example(encode_jpeg(testing::synthetic_image(500, 375, 3, 5), 90), 42);
  in.file = "x.tfrecord";
  in.record = 3;
  ImageMapOptions options;
  options.augment.height = 64;
  options.augment.width = 48;
  MapFn fn = make_image_map(options);
  Element a = fn(in);
  Element b = fn(in);
  ASSERT_EQ(a.tensors.size(), 2u);
  EXPECT_EQ(a.tensors[0].shape(), (Shape{64, 48, 3}));
  EXPECT_EQ(a.tensors[0].dtype(), DType::kU8);
  EXPECT_EQ(*a.tensors[1].data<int64_t>(), 42);
  EXPECT_EQ(0, std::memcmp(a.tensors[0].raw_data(), b.tensors[0].raw_data(), a.tensors[0].nbytes()));
  in.epoch = 1;  // another epoch draws another crop
  Element c = fn(in);
  EXPECT_NE(0, std::memcmp(a.tensors[0].raw_data(), c.tensors[0].raw_data(), a.tensors[0].nbytes()));
  options.augment.layout = ImageLayout::kNCHW;
  options.augment.normalize = true;
  Element d = make_image_map(options)(in);
  EXPECT_EQ(d.tensors[0].shape(), (Shape{3, 64, 48}));
  EXPECT_EQ(d.tensors[0].dtype(), DType::kF32);
}

TEST(PipelineImage, BadImageErrorNamesTheRecord) {
  Element in;
  in.text = testing::image_example(std::string("\xff\xd8\xff garbage", 11), 1);
  in.file = "bad.tfrecord";
  in.record = 12;
  try {
    make_image_map({})(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("bad.tfrecord record 12"), std::string::npos) << e.what();
  }
}

TEST(PipelineImage, ALabelOutsideTheModelsClassesNamesTheRecord) {
  Element in;
  in.text = testing::image_example(encode_jpeg(testing::synthetic_image(32, 32, 3, 5), 90), 11);
  in.file = "train-3.tfrecord";
  in.record = 57;
  ImageMapOptions options;
  options.augment.height = 16;
  options.augment.width = 16;
  EXPECT_EQ(*make_image_map(options)(in).tensors[1].data<int64_t>(), 11);  // no class count: not checked
  options.num_classes = 10;
  try {
    make_image_map(options)(in);
    FAIL() << "label 11 of 10 classes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string what = e.what();
    EXPECT_NE(what.find("train-3.tfrecord record 57: label 11"), std::string::npos) << what;
    EXPECT_NE(what.find("model.num_classes 10"), std::string::npos) << what;
  }
}

// The image map's error for one record holding `encoded` (and label 1), or "" when it decodes.
std::string map_error(const std::string& example) {
  Element in;
  in.text = example;
  in.file = "hostile.tfrecord";
  in.record = 7;
  try {
    make_image_map({})(in);
  } catch (const Error& e) {
    return std::string(error_code_name(e.code())) + ": " + e.what();
  }
  return "";
}

uint32_t load_be32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<uint8_t>(s[at])} << 24) | (uint32_t{static_cast<uint8_t>(s[at + 1])} << 16) |
         (uint32_t{static_cast<uint8_t>(s[at + 2])} << 8) | uint32_t{static_cast<uint8_t>(s[at + 3])};
}

void store_be(std::string& s, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[at + i] = static_cast<char>(v >> (8 * (bytes - 1 - i)));
}

TEST(PipelineImage, AHeaderClaimingHugeDimensionsIsAnErrorBeforeAnyAllocation) {
  // A small JPEG whose frame header (SOF0) says 65500 x 65500: 4.3 G pixels from a few hundred bytes.
  std::string jpeg = encode_jpeg(testing::synthetic_image(16, 16, 3, 1), 90);
  size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  store_be(jpeg, sof + 5, 65500, 2);  // height
  store_be(jpeg, sof + 7, 65500, 2);  // width
  std::string e = map_error(testing::image_example(jpeg, 1));
  EXPECT_NE(e.find("DataLoss"), std::string::npos) << e;
  EXPECT_NE(e.find("hostile.tfrecord record 7"), std::string::npos) << e;
  EXPECT_NE(e.find("claims 65500x65500 pixels"), std::string::npos) << e;

  // A PNG whose IHDR (CRC recomputed, so libpng accepts it) says 100000 x 100000.
  std::string png = encode_png(testing::synthetic_image(8, 8, 3, 2));
  ASSERT_EQ(png.substr(12, 4), "IHDR");
  store_be(png, 16, 100000, 4);
  store_be(png, 20, 100000, 4);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  store_be(png, 29, static_cast<uint32_t>(crc), 4);
  ASSERT_EQ(load_be32(png, 16), 100000u);
  e = map_error(testing::image_example(png, 1));
  EXPECT_NE(e.find("hostile.tfrecord record 7"), std::string::npos) << e;
  EXPECT_NE(e.find("claims 100000x100000 pixels"), std::string::npos) << e;
}

TEST(PipelineImage, AnImageFeatureWithTwoValuesIsRefusedAsATwoValueLabelIs) {
  const std::string jpeg = encode_jpeg(testing::synthetic_image(16, 16, 3, 1), 90);
  FeatureMap features;
  features["image/encoded"] = Feature::of_bytes({jpeg, jpeg});
  features["image/class/label"] = Feature::of_ints({1});
  const std::string e = map_error(serialize_example(features));
  EXPECT_NE(e.find("InvalidArgument"), std::string::npos) << e;
  EXPECT_NE(e.find("with 2 values; expected one encoded image"), std::string::npos) << e;
}

TEST(PipelineImage, AugmentationFollowsTheFilesNameNotThePathItIsReachedBy) {
  auto draws = [](const std::string& file, int64_t record) {
    Element e;
    e.file = file;
    e.record = record;
    Generator g = element_generator(7, 0, e);
    return std::vector<uint32_t>{g.next_u32(), g.next_u32(), g.next_u32()};
  };
  const auto first = draws("/data/fashion/train-00000-of-00002.tfrecord", 5);
  EXPECT_EQ(draws("fashion/train-00000-of-00002.tfrecord", 5), first);      // relative
  EXPECT_EQ(draws("/mnt/ssd/copy/train-00000-of-00002.tfrecord", 5), first);  // copied elsewhere
  EXPECT_EQ(draws("train-00000-of-00002.tfrecord", 5), first);
  EXPECT_NE(draws("/data/fashion/train-00001-of-00002.tfrecord", 5), first);  // another file
  EXPECT_NE(draws("/data/fashion/train-00000-of-00002.tfrecord", 6), first);  // another record
}

TEST(PipelineImage, ATruncatedJpegIsRefusedUnlessAccepted) {
  std::string jpeg = encode_jpeg(testing::synthetic_image(64, 64, 3, 3), 90);
  Element in;
  in.text = testing::image_example(jpeg.substr(0, jpeg.size() / 2), 1);  // the lower rows are gone
  in.file = "cut.tfrecord";
  in.record = 4;
  ImageMapOptions options;
  options.augment.height = 0;  // the whole image: every row is needed
  options.augment.width = 0;
  options.augment.random_resized_crop = false;
  options.augment.horizontal_flip = false;
  try {
    make_image_map(options)(in);
    FAIL() << "a truncated JPEG trained silently";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("cut.tfrecord record 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ends before the image does: a truncated file"), std::string::npos)
        << e.what();
  }
  ImageMapOptions cropped = options;  // a small crop of the top rows alone: still the file's damage
  cropped.augment.height = cropped.augment.width = 8;
  cropped.augment.random_resized_crop = true;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    in.epoch = epoch;
    EXPECT_THROW(make_image_map(cropped)(in), Error) << "epoch " << epoch;
  }
  in.epoch = 0;
  options.accept_truncated_jpeg = true;  // TensorFlow's try_recover_truncated
  EXPECT_EQ(make_image_map(options)(in).tensors[0].shape(), (Shape{64, 64, 3}));
  in.text = testing::image_example(jpeg, 1);  // whole: no complaint under either policy
  options.accept_truncated_jpeg = false;
  EXPECT_EQ(make_image_map(options)(in).tensors[0].shape(), (Shape{64, 64, 3}));
}

// EMBEDDING.md's example of reading JPEG records with the public header alone, as written there.
TEST(PipelineImage, ThePublicImageMapReadsJpegRecordsAsTheDocsShow) {
  testing::ScratchDir dir;
  std::vector<std::string> records;
  for (int i = 0; i < 6; ++i) {
    records.push_back(testing::image_example(encode_jpeg(testing::synthetic_image(48, 40, 3, i), 90), i % 3));
  }
  testing::write_tfrecord(dir.path("train-0.tfrecord"), records);
  ImageMapOptions image;
  image.augment.height = image.augment.width = 32;
  image.augment.normalize = true;
  image.augment.layout = ImageLayout::kNCHW;
  Dataset ds = Dataset::list_files(dir.path("train-*.tfrecord"), /*shuffle=*/true, /*seed=*/1)
                   .interleave([](const Element& f) { return Dataset::tfrecord(f.text); }, 4)
                   .shuffle(10000, 1)
                   .map(make_image_map(image), /*num_parallel_calls=*/4)
                   .batch(4);
  DatasetIterator it = ds.make_iterator(0);
  Element batch;
  ASSERT_TRUE(it.next(&batch));
  EXPECT_EQ(batch.tensors.at(0).shape(), (Shape{4, 3, 32, 32}));
  EXPECT_EQ(batch.tensors.at(0).dtype(), DType::kF32);
  EXPECT_EQ(batch.tensors.at(1).shape(), (Shape{4}));
}

}  // namespace
}  // namespace tandem::data
