// Image decoders for loader threads: JPEG through libjpeg-turbo, decoded at the smallest of its
// scaling factors (1/8 .. 1) that keeps the region needed at least as large as the target, and
// PNG through libpng. Output is interleaved 8-bit (H, W, C); errors are tandem::Error(kDataLoss).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

struct Image {
  std::vector<uint8_t> pixels;  // (H, W, C), rows packed
  int width = 0;
  int height = 0;
  int channels = 0;
  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * channels; }
};

enum class ImageFormat { kAuto, kJpeg, kPng, kRaw };
std::string_view image_format_name(ImageFormat format);  // "auto", "jpeg", "png", "raw"
ImageFormat parse_image_format(std::string_view name);
// From the first bytes; kRaw when neither the JPEG nor the PNG signature is there.
ImageFormat sniff_image_format(std::string_view bytes);

struct ImageSize {
  int width = 0;
  int height = 0;
};

// Where an image's pixels sit in the image they were cut from: a region decoded on its own
// holds columns [x, x + width) and rows [y, y + height) of a full_width x full_height image.
struct ImageOrigin {
  int x = 0, y = 0;
  int full_width = 0, full_height = 0;
};

// Columns [x_begin, x_end) and rows [y_begin, y_end) of an image.
struct PixelSpan {
  int x_begin = 0, x_end = 0;
  int y_begin = 0, y_end = 0;
};

// A libjpeg-turbo scaling factor, num / den (1/8 ... 1).
struct JpegScale {
  int num = 1;
  int den = 1;
};

// The most pixels an encoded image may claim: where PIL raises DecompressionBombError (twice
// Image.MAX_IMAGE_PIXELS, 178,956,970: about 13377 x 13377, 512 MiB of RGB). Its header's size is
// checked before anything is allocated, so a few hundred bytes claiming 16384 x 16384 are an error,
// not gigabytes.
inline constexpr int64_t kMaxImagePixels = 178956970;

// Whether a JPEG's data reaches its end: an EOI marker (FF D9) after the first scan's start. Inside
// entropy-coded data every FF byte is stuffed (FF 00), so an EOI there is the end; the segments
// before the scan (an EXIF thumbnail with its own EOI) are skipped by their lengths. A truncated
// file fails whatever region a crop would decode.
bool jpeg_data_complete(std::string_view bytes);

// The JPEG's size from its header, without decoding; DataLoss above kMaxImagePixels.
ImageSize jpeg_size(std::string_view bytes);
// The smallest of the scales 1/1, 1/2, 1/4, 1/8 that keeps the image at least need_w x need_h
// (1/1 when nothing is needed or nothing smaller is enough), and the image's size at a scale.
JpegScale choose_jpeg_scale(ImageSize full, int need_w, int need_h);
ImageSize scaled_size(ImageSize full, JpegScale scale);
// Decodes at `scale` only the pixels of `want` (in the scaled image's pixels) and what
// libjpeg-turbo needs around them: out holds a region of the scaled image and origin says where
// it sits. Inside `want` the pixels are those decode_jpeg gives at that scale, bit for bit. A
// truncated file (no EOI after the scan, or data ending before the rows read) is a DataLoss,
// whatever the region, unless accept_truncated (then libjpeg fills the missing rows grey, as
// TensorFlow's try_recover_truncated does).
void decode_jpeg_region(std::string_view bytes, int channels, JpegScale scale, const PixelSpan& want, Image* out,
                        ImageOrigin* origin, bool accept_truncated = false);

// Decodes a JPEG to RGB (channels 3) or grayscale (channels 1). When need_w/need_h are given,
// decodes at the smallest libjpeg-turbo scale whose size is still >= (need_w, need_h) and
// returns that scale as scale_num/scale_den (1/1 when decoding at full size).
void decode_jpeg(std::string_view bytes, int channels, int need_w, int need_h, Image* out, int* scale_num,
                 int* scale_den);
void decode_png(std::string_view bytes, int channels, Image* out);

// Encoders, for converters, tests and benchmarks that make their own fixtures.
std::string encode_jpeg(const Image& image, int quality);
std::string encode_png(const Image& image);

}  // namespace tandem::data
