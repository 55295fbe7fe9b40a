// The fast image paths give what the plain ones give, bit for bit, so a seed keeps giving the same
// batches: region-of-interest JPEG decoding against a full decode at the same scale, and the
// separable resize (on a whole image or on a decoded region) against the one-pass bilinear
// resize it replaced, kept here as the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "data/pipeline/image_augment.h"
#include "data/pipeline/image_decode.h"
#include "data/pipeline/image_map.h"
#include "engine/core/random.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

constexpr int kFracBits = 11;
constexpr int kOne = 1 << kFracBits;

struct RefTap {
  int index, weight;
};

std::vector<RefTap> ref_taps(float start, float length, int src_size, int dst_size) {
  std::vector<RefTap> out(static_cast<size_t>(dst_size));
  float step = length / static_cast<float>(dst_size);
  float lo = std::max(0.0f, std::floor(start));
  float hi = std::min(static_cast<float>(src_size - 1), std::ceil(start + length) - 1);
  for (int i = 0; i < dst_size; ++i) {
    float s = std::clamp(start + (static_cast<float>(i) + 0.5f) * step - 0.5f, lo, std::max(lo, hi));
    int i0 = std::min(static_cast<int>(s), src_size - 1);
    out[static_cast<size_t>(i)] = {i0, static_cast<int>(std::lround((s - static_cast<float>(i0)) * kOne))};
  }
  return out;
}

// The one-pass resize the pipeline used before: four neighbours per output pixel.
std::vector<uint8_t> reference_resize(const Image& src, const CropBox& box, bool flip, int dst_w, int dst_h) {
  std::vector<RefTap> xs = ref_taps(box.x, box.width, src.width, dst_w);
  std::vector<RefTap> ys = ref_taps(box.y, box.height, src.height, dst_h);
  if (flip) std::reverse(xs.begin(), xs.end());
  const int c_count = src.channels;
  std::vector<uint8_t> out(static_cast<size_t>(dst_w) * dst_h * c_count);
  for (int y = 0; y < dst_h; ++y) {
    const uint8_t* r0 = src.row(ys[y].index);
    const uint8_t* r1 = src.row(std::min(ys[y].index + 1, src.height - 1));
    const int wy = ys[y].weight;
    for (int x = 0; x < dst_w; ++x) {
      const int x0 = xs[x].index, x1 = std::min(x0 + 1, src.width - 1), wx = xs[x].weight;
      for (int c = 0; c < c_count; ++c) {
        int top = r0[x0 * c_count + c] * (kOne - wx) + r0[x1 * c_count + c] * wx;
        int bottom = r1[x0 * c_count + c] * (kOne - wx) + r1[x1 * c_count + c] * wx;
        out[(static_cast<size_t>(y) * dst_w + x) * c_count + c] =
            static_cast<uint8_t>((top * (kOne - wy) + bottom * wy + (1 << (2 * kFracBits - 1))) >> (2 * kFracBits));
      }
    }
  }
  return out;
}

TEST(PipelineImageExact, SeparableResizeMatchesTheOnePassResize) {
  Generator rng(7);
  for (int channels : {1, 3, 4}) {
    Image src = testing::synthetic_image(97, 61, channels, static_cast<uint64_t>(channels));
    for (int trial = 0; trial < 60; ++trial) {
      CropBox box = random_resized_crop_box(src.width, src.height, RandomResizedCropRange{}, rng);
      int w = 1 + static_cast<int>(rng.below(80)), h = 1 + static_cast<int>(rng.below(80));
      bool flip = (trial & 1) != 0;
      std::vector<uint8_t> got(static_cast<size_t>(w) * h * channels);
      resize_bilinear(src, box, flip, w, h, got.data());
      ASSERT_EQ(got, reference_resize(src, box, flip, w, h)) << channels << " channels, trial " << trial;
    }
  }
}

TEST(PipelineImageExact, ResizeOfARegionMatchesResizeOfTheWholeImage) {
  Generator rng(11);
  Image src = testing::synthetic_image(120, 90, 3, 5);
  for (int trial = 0; trial < 40; ++trial) {
    CropBox box = random_resized_crop_box(src.width, src.height, RandomResizedCropRange{}, rng);
    PixelSpan span = resize_source_span(src.width, src.height, box, 32, 24);
    // Just the span, cut out of the whole image: resizing it must need nothing else.
    Image region;
    region.width = span.x_end - span.x_begin;
    region.height = span.y_end - span.y_begin;
    region.channels = 3;
    for (int y = span.y_begin; y < span.y_end; ++y) {
      region.pixels.insert(region.pixels.end(), src.row(y) + span.x_begin * 3, src.row(y) + span.x_end * 3);
    }
    std::vector<uint8_t> got(32 * 24 * 3);
    resize_bilinear(region, ImageOrigin{span.x_begin, span.y_begin, src.width, src.height}, box, true, 32, 24,
                    got.data());
    ASSERT_EQ(got, reference_resize(src, box, true, 32, 24)) << "trial " << trial;
  }
}

TEST(PipelineImageExact, NormalizeGivesTheFormulasFloats) {
  std::vector<uint8_t> hwc(256 * 3);
  for (size_t i = 0; i < hwc.size(); ++i) hwc[i] = static_cast<uint8_t>((i * 7) % 256);
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, std{0.229f, 0.224f, 0.225f};
  for (bool chw : {true, false}) {
    std::vector<float> got(hwc.size());
    normalize(hwc.data(), 16, 16, 3, mean, std, chw, got.data());
    for (size_t i = 0; i < 256; ++i) {
      for (size_t c = 0; c < 3; ++c) {
        float want = static_cast<float>(hwc[i * 3 + c]) * (1.0f / (255.0f * std[c])) + (-mean[c] / std[c]);
        ASSERT_EQ(got[chw ? c * 256 + i : i * 3 + c], want) << "pixel " << i << " channel " << c;
      }
    }
  }
}

// Every wanted pixel of a region decode equals the full decode's at the same scale.
void expect_region_matches(const std::string& jpeg, int channels, JpegScale scale, const PixelSpan& want) {
  ImageSize full = jpeg_size(jpeg);
  ImageSize size = scaled_size(full, scale);
  Image whole;
  int num = 0, den = 0;
  // decode_jpeg picks the smallest scale still covering the size asked: ask for exactly this one's.
  decode_jpeg(jpeg, channels, size.width, size.height, &whole, &num, &den);
  ASSERT_EQ(num * scale.den, scale.num * den);
  Image region;
  ImageOrigin origin;
  decode_jpeg_region(jpeg, channels, scale, want, &region, &origin);
  ASSERT_EQ(origin.full_width, whole.width);
  ASSERT_EQ(origin.full_height, whole.height);
  ASSERT_LE(origin.x, want.x_begin);
  ASSERT_LE(origin.y, want.y_begin);
  ASSERT_GE(origin.x + region.width, want.x_end);
  ASSERT_GE(origin.y + region.height, want.y_end);
  for (int y = want.y_begin; y < want.y_end; ++y) {
    const uint8_t* a = whole.row(y) + static_cast<size_t>(want.x_begin) * channels;
    const uint8_t* b = region.row(y - origin.y) + static_cast<size_t>(want.x_begin - origin.x) * channels;
    ASSERT_TRUE(std::equal(a, a + static_cast<size_t>(want.x_end - want.x_begin) * channels, b))
        << "row " << y << " of span x [" << want.x_begin << ", " << want.x_end << ") y [" << want.y_begin << ", "
        << want.y_end << ") at scale " << scale.num << "/" << scale.den;
  }
}

TEST(PipelineImageExact, RegionDecodeMatchesFullDecodeAtEveryScale) {
  Generator rng(3);
  for (int channels : {3, 1}) {
    Image src = testing::synthetic_image(500, 375, channels, 9);
    std::string jpeg = encode_jpeg(src, 90);
    for (int den : {1, 2, 4, 8}) {
      ImageSize size = scaled_size({500, 375}, {1, den});
      for (int trial = 0; trial < 6; ++trial) {
        int x0 = static_cast<int>(rng.below(static_cast<uint64_t>(size.width)));
        int y0 = static_cast<int>(rng.below(static_cast<uint64_t>(size.height)));
        int x1 = x0 + 1 + static_cast<int>(rng.below(static_cast<uint64_t>(size.width - x0)));
        int y1 = y0 + 1 + static_cast<int>(rng.below(static_cast<uint64_t>(size.height - y0)));
        expect_region_matches(jpeg, channels, {1, den}, {x0, x1, y0, y1});
      }
      expect_region_matches(jpeg, channels, {1, den}, {0, size.width, 0, size.height});
    }
  }
}

// TensorFlow's decode_jpeg(ratio) and PIL's draft offer 1, 2, 4 and 8; so does the pipeline, and
// it takes the largest ratio that still leaves the size asked for.
TEST(PipelineImageExact, JpegScaleIsTheLargestPowerOfTwoRatioThatStillCovers) {
  auto ratio = [](int w, int h) {
    JpegScale s = choose_jpeg_scale({500, 375}, w, h);
    EXPECT_EQ(s.num, 1);
    return s.den;
  };
  EXPECT_EQ(ratio(0, 0), 1);
  EXPECT_EQ(ratio(500, 375), 1);
  EXPECT_EQ(ratio(300, 100), 1);  // 7/8 and 5/8 would cover it; they are not offered
  EXPECT_EQ(ratio(250, 188), 2);
  EXPECT_EQ(ratio(251, 10), 1);
  EXPECT_EQ(ratio(10, 189), 1);
  EXPECT_EQ(ratio(125, 94), 4);
  EXPECT_EQ(ratio(63, 47), 8);
  EXPECT_EQ(ratio(1, 1), 8);
}

TEST(PipelineImageExact, RegionDecodeOfABrokenJpegThrowsAndTheNextDecodeWorks) {
  std::string jpeg = encode_jpeg(testing::synthetic_image(64, 48, 3, 2), 90);
  Image out;
  ImageOrigin origin;
  EXPECT_THROW(decode_jpeg_region(jpeg.substr(0, 3) + "not a jpeg", 3, {1, 1}, {0, 8, 0, 8}, &out, &origin), Error);
  decode_jpeg_region(jpeg, 3, {1, 2}, {0, 32, 0, 24}, &out, &origin);
  EXPECT_EQ(origin.full_width, 32);
  EXPECT_EQ(out.height, 24);
}

// The bytes of every batch of a JPEG pipeline (interleave, map with random resized crop and flip,
// batch), as the bench and the trainer build it.
std::vector<uint8_t> batch_bytes(const std::vector<std::string>& files, int64_t threads) {
  ImageMapOptions options;
  options.augment.height = options.augment.width = 48;
  options.seed = 5;
  Dataset ds = Dataset::from_files(files)
                   .interleave([](const Element& f) { return Dataset::tfrecord(f.text); }, 2, 1, threads)
                   .map(make_image_map(options), threads, true)
                   .batch(4, false)
                   .prefetch(2);
  std::vector<uint8_t> out;
  DatasetIterator it = ds.make_iterator();
  Element batch;
  while (it.next(&batch)) {
    for (const Tensor& t : batch.tensors) {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      out.insert(out.end(), p, p + t.nbytes());
    }
  }
  return out;
}

TEST(PipelineImageExact, BatchesAreTheSameOnOneThreadOrFour) {
  testing::ScratchDir dir;
  std::vector<std::string> files;
  for (int f = 0; f < 3; ++f) {
    std::vector<std::string> records;
    for (int i = 0; i < 7; ++i) {
      Image im = testing::synthetic_image(120 + 8 * i, 90 + 4 * f, 3, static_cast<uint64_t>(f * 10 + i));
      records.push_back(testing::image_example(encode_jpeg(im, 90), i));
    }
    files.push_back(dir.path("part-" + std::to_string(f) + ".tfrecord"));
    testing::write_tfrecord(files.back(), records);
  }
  std::vector<uint8_t> one = batch_bytes(files, 1);
  EXPECT_EQ(one.size(), 21u * (48 * 48 * 3 + 8));
  for (int run = 0; run < 3; ++run) EXPECT_EQ(batch_bytes(files, 4), one) << "run " << run;
}

}  // namespace
}  // namespace tandem::data
