// Limits an image must keep before anything is decoded or trained on: PIL's decompression-bomb
// pixel count for what a header claims, and finite normalisation constants for the image map.
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include "data/pipeline/image_decode.h"
#include "data/pipeline/image_map.h"
#include "engine/core/error.h"
#include "tests/pipeline/pipeline_test_util.h"

namespace tandem::data {
namespace {

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// A PNG chunk: length, type, data and the CRC of type and data.
std::string png_chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return be32(static_cast<uint32_t>(data.size())) + body + be32(static_cast<uint32_t>(crc));
}

// A PNG of a few dozen bytes whose header claims width x height 8-bit RGB pixels: IHDR, an IDAT of
// one compressed row (libpng reads the header up to the first IDAT), IEND.
std::string claimed_png(uint32_t width, uint32_t height) {
  const std::string ihdr = be32(width) + be32(height) + std::string{8, 2, 0, 0, 0};  // depth 8, RGB
  const std::string row(16, '\0');
  uLongf size = compressBound(row.size());
  std::string idat(size, '\0');
  EXPECT_EQ(compress(reinterpret_cast<Bytef*>(idat.data()), &size, reinterpret_cast<const Bytef*>(row.data()),
                     row.size()),
            Z_OK);
  idat.resize(size);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", idat) +
         png_chunk("IEND", "");
}

TEST(PipelineImageLimits, APngClaimingMoreThanPilsLimitIsRefusedBeforeAllocating) {
  // 16384 x 16384 was exactly the old limit (2^28): 768 MiB allocated for a 60-byte file.
  const std::string png = claimed_png(16384, 16384);
  ASSERT_LT(png.size(), 100u);
  Image out;
  const auto start = std::chrono::steady_clock::now();
  try {
    decode_png(png, 3, &out);
    FAIL() << "decoded a " << out.width << "x" << out.height << " image";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    const std::string what = e.what();
    EXPECT_NE(what.find("PNG header (" + std::to_string(png.size()) + " bytes) claims 16384x16384 pixels"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("more than the 178956970"), std::string::npos) << what;
    EXPECT_NE(what.find("decompression-bomb"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(out.pixels.capacity(), 0u) << "pixels were allocated for a refused header";

  // One row and column past 13377 x 13377 (178,944,129 pixels, under PIL's 178,956,970) is over it.
  Image past;
  try {
    decode_png(claimed_png(13378, 13378), 1, &past);
    FAIL() << "decoded a 13378x13378 image";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("claims 13378x13378 pixels"), std::string::npos) << e.what();
  }
  EXPECT_EQ(past.pixels.capacity(), 0u);
}

TEST(PipelineImageLimits, AJpegHeaderClaimingMoreThanPilsLimitIsRefused) {
  // The frame header (SOF0) of a real 16x16 JPEG rewritten to claim 16384 x 16384.
  std::string jpeg = encode_jpeg(testing::synthetic_image(16, 16, 3, 1), 90);
  const size_t sof = jpeg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  for (size_t at : {sof + 5, sof + 7}) {  // height, then width: 0x4000 each
    jpeg[at] = '\x40';
    jpeg[at + 1] = '\x00';
  }
  try {
    const ImageSize size = jpeg_size(jpeg);
    FAIL() << "jpeg_size gave " << size.width << "x" << size.height;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("claims 16384x16384 pixels"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("decompression-bomb"), std::string::npos) << e.what();
  }
}

// The error make_image_map throws for these options, or "" when it makes the map.
std::string map_error(const ImageMapOptions& options) {
  try {
    make_image_map(options);
  } catch (const Error& e) {
    return std::string(error_code_name(e.code())) + ": " + e.what();
  }
  return "";
}

TEST(PipelineImageLimits, NormalisingWithANonFiniteMeanOrStdIsRefused) {
  // A NaN mean made NaN inputs, then NaN first-layer weights, while ReLU kept the loss finite.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  ImageMapOptions options;
  options.augment.normalize = true;
  options.augment.mean = {nan, 0.5f, 0.5f};
  std::string e = map_error(options);
  EXPECT_NE(e.find("InvalidArgument"), std::string::npos) << e;
  EXPECT_NE(e.find("image normalisation: mean[0] = nan"), std::string::npos) << e;

  options.augment.mean = {0.5f, 0.5f, 0.5f};
  options.augment.std = {0.25f, inf, 0.25f};
  e = map_error(options);
  EXPECT_NE(e.find("std[1] = inf"), std::string::npos) << e;
  options.augment.std = {0.25f, 0.25f, 0.0f};
  EXPECT_NE(map_error(options).find("std[2] = 0"), std::string::npos);

  options.augment.std = {0.25f, 0.25f, 0.25f};
  EXPECT_EQ(map_error(options), "");
  // Unused constants are not checked: without normalize the batch stays uint8.
  options.augment.normalize = false;
  options.augment.mean = {nan, nan, nan};
  EXPECT_EQ(map_error(options), "");
}

}  // namespace
}  // namespace tandem::data
