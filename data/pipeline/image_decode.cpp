// JPEG (libjpeg-turbo's TurboJPEG API, one handle per loader thread) and PNG (libpng's
// simplified API) decoding into packed (H, W, C) bytes.
#include "data/pipeline/image_decode.h"

#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <memory>

#include "engine/core/error.h"
#include "engine/core/suggest.h"

namespace tandem::data {
namespace {

// One decompressor per thread: creating one costs more than decoding a small image. After a
// failed call TurboJPEG 2.1 can leave the handle in a state that fails the next good image,
// so a failure replaces it.
struct DecoderHandle {
  tjhandle h = tjInitDecompress();
  ~DecoderHandle() { release(); }
  void release() {
    if (h != nullptr) tjDestroy(h);
    h = nullptr;
  }
};

DecoderHandle& decoder_slot() {
  thread_local DecoderHandle handle;
  return handle;
}

tjhandle thread_decoder() {
  DecoderHandle& slot = decoder_slot();
  if (slot.h == nullptr) slot.h = tjInitDecompress();
  TANDEM_CHECK(slot.h != nullptr, ErrorCode::kInternal, "tjInitDecompress failed: {}", tjGetErrorStr2(nullptr));
  return slot.h;
}

[[noreturn]] void fail_decode(std::string_view what, size_t bytes) {
  std::string reason = tjGetErrorStr2(decoder_slot().h);
  decoder_slot().release();
  throw_error(ErrorCode::kDataLoss, "{} ({} bytes): {}", what, bytes, reason);
}

void check_claimed_size(std::string_view format, int64_t width, int64_t height, size_t bytes) {
  TANDEM_CHECK(width > 0 && height > 0, ErrorCode::kDataLoss,
               "{} header ({} bytes) claims {}x{} pixels, an empty image: a truncated or damaged file", format, bytes,
               width, height);
  TANDEM_CHECK(width * height <= kMaxImagePixels, ErrorCode::kDataLoss,
               "{} header ({} bytes) claims {}x{} pixels, more than the {} an image may have (PIL's "
               "decompression-bomb limit): a damaged or hostile image",
               format, bytes, width, height, kMaxImagePixels);
}

}  // namespace

std::string_view image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kAuto: return "auto";
    case ImageFormat::kJpeg: return "jpeg";
    case ImageFormat::kPng: return "png";
    case ImageFormat::kRaw: return "raw";
  }
  return "?";
}

ImageFormat parse_image_format(std::string_view name) {
  for (ImageFormat f : {ImageFormat::kAuto, ImageFormat::kJpeg, ImageFormat::kPng, ImageFormat::kRaw}) {
    if (name == image_format_name(f)) return f;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown image format '{}': expected auto, jpeg, png or raw{}", name,
              did_you_mean(name, {"auto", "jpeg", "png", "raw"}));
}

ImageFormat sniff_image_format(std::string_view bytes) {
  if (bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF && static_cast<uint8_t>(bytes[1]) == 0xD8 &&
      static_cast<uint8_t>(bytes[2]) == 0xFF) {
    return ImageFormat::kJpeg;
  }
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kRaw;
}

bool jpeg_data_complete(std::string_view bytes) {
  auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  size_t i = 2;  // after SOI
  // Marker segments up to the first SOS (FF DA), each FF xx then a 2-byte big-endian length.
  while (i + 4 <= bytes.size()) {
    if (byte(i) != 0xFF) return false;
    const uint8_t marker = byte(i + 1);
    if (marker == 0xFF) {  // fill bytes before a marker
      ++i;
      continue;
    }
    const size_t length = static_cast<size_t>(byte(i + 2)) << 8 | byte(i + 3);
    if (marker == 0xDA) {
      const size_t scan = i + 2 + length;
      for (size_t k = scan; k + 1 < bytes.size(); ++k) {
        if (byte(k) == 0xFF && byte(k + 1) == 0xD9) return true;
      }
      return false;
    }
    i += 2 + length;
  }
  return false;
}

ImageSize jpeg_size(std::string_view bytes) {
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  int rc = tjDecompressHeader3(thread_decoder(), reinterpret_cast<const unsigned char*>(bytes.data()),
                               static_cast<unsigned long>(bytes.size()), &w, &h, &subsamp, &colorspace);
  if (rc != 0) fail_decode("JPEG header", bytes.size());
  check_claimed_size("JPEG", w, h, bytes.size());
  return {w, h};
}

JpegScale choose_jpeg_scale(ImageSize full, int need_w, int need_h) {
  // Only 1/1, 1/2, 1/4 and 1/8, the ratios of TensorFlow's decode_jpeg and PIL's draft mode:
  // libjpeg-turbo's IDCTs for these scales are SIMD, the 7/8 ... 3/8 ones plain C and slower
  // than decoding the next power of two and resizing a little more.
  JpegScale best{1, 1};
  for (int den = 2; den <= 8 && need_w > 0 && need_h > 0; den *= 2) {
    tjscalingfactor f{1, den};
    if (TJSCALED(full.width, f) < need_w || TJSCALED(full.height, f) < need_h) break;
    best = {1, den};
  }
  return best;
}

ImageSize scaled_size(ImageSize full, JpegScale scale) {
  tjscalingfactor f{scale.num, scale.den};
  return {TJSCALED(full.width, f), TJSCALED(full.height, f)};
}

void decode_jpeg(std::string_view bytes, int channels, int need_w, int need_h, Image* out, int* scale_num,
                 int* scale_den) {
  TANDEM_CHECK(channels == 1 || channels == 3, ErrorCode::kInvalidArgument, "decode_jpeg: channels {} (1 or 3)",
               channels);
  tjhandle tj = thread_decoder();
  ImageSize full = jpeg_size(bytes);
  JpegScale best = choose_jpeg_scale(full, need_w, need_h);
  ImageSize size = scaled_size(full, best);
  out->width = size.width;
  out->height = size.height;
  out->channels = channels;
  out->pixels.resize(static_cast<size_t>(out->width) * out->height * channels);
  int rc = tjDecompress2(tj, reinterpret_cast<const unsigned char*>(bytes.data()),
                         static_cast<unsigned long>(bytes.size()), out->pixels.data(), out->width, 0, out->height,
                         channels == 3 ? TJPF_RGB : TJPF_GRAY, 0);
  // A warning (rc -1 with TJERR_WARNING) still gives an image, as TensorFlow's decoder accepts.
  if (rc != 0 && tjGetErrorCode(tj) != TJERR_WARNING) fail_decode("JPEG decode", bytes.size());
  if (scale_num != nullptr) *scale_num = best.num;
  if (scale_den != nullptr) *scale_den = best.den;
}

void decode_png(std::string_view bytes, int channels, Image* out) {
  TANDEM_CHECK(channels == 1 || channels == 3, ErrorCode::kInvalidArgument, "decode_png: channels {} (1 or 3)",
               channels);
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  TANDEM_CHECK(png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) != 0, ErrorCode::kDataLoss,
               "PNG header ({} bytes): {}", bytes.size(), image.message);
  image.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  try {
    check_claimed_size("PNG", image.width, image.height, bytes.size());
  } catch (...) {
    png_image_free(&image);
    throw;
  }
  out->width = static_cast<int>(image.width);
  out->height = static_cast<int>(image.height);
  out->channels = channels;
  out->pixels.resize(PNG_IMAGE_SIZE(image));
  int ok = png_image_finish_read(&image, nullptr, out->pixels.data(), 0, nullptr);
  std::string message = image.message;
  png_image_free(&image);
  TANDEM_CHECK(ok != 0, ErrorCode::kDataLoss, "PNG decode ({} bytes): {}", bytes.size(), message);
}

std::string encode_jpeg(const Image& image, int quality) {
  TANDEM_CHECK(image.channels == 1 || image.channels == 3, ErrorCode::kInvalidArgument,
               "encode_jpeg: channels {} (1 or 3)", image.channels);
  tjhandle tj = tjInitCompress();
  TANDEM_CHECK(tj != nullptr, ErrorCode::kInternal, "tjInitCompress failed: {}", tjGetErrorStr2(nullptr));
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, image.pixels.data(), image.width, 0, image.height, image.channels == 3 ? TJPF_RGB : TJPF_GRAY,
                       &jpeg, &size, image.channels == 3 ? TJSAMP_420 : TJSAMP_GRAY, quality, 0);
  std::string error = rc == 0 ? "" : tjGetErrorStr2(tj);
  std::string out = rc == 0 ? std::string(reinterpret_cast<const char*>(jpeg), size) : "";
  tjFree(jpeg);
  tjDestroy(tj);
  TANDEM_CHECK(rc == 0, ErrorCode::kInternal, "tjCompress2 ({}x{}): {}", image.width, image.height, error);
  return out;
}

std::string encode_png(const Image& image) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = image.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  png_alloc_size_t size = 0;
  TANDEM_CHECK(png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr) != 0,
               ErrorCode::kInternal, "PNG encode: {}", png.message);
  std::string out(size, '\0');
  TANDEM_CHECK(png_image_write_to_memory(&png, out.data(), &size, 0, image.pixels.data(), 0, nullptr) != 0,
               ErrorCode::kInternal, "PNG encode: {}", png.message);
  out.resize(size);
  return out;
}

}  // namespace tandem::data
