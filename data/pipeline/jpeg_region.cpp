// Region-of-interest JPEG decoding through libjpeg-turbo's libjpeg API (TurboJPEG 2.1 cannot
// crop): only the rows and columns a crop needs go through the IDCT, upsampling and colour
// conversion (jpeg_skip_scanlines, jpeg_crop_scanline), as tf.image.decode_and_crop_jpeg.
// One decompressor per loader thread; errors leave it through longjmp, so the frames it can
// cross hold only trivially destructible objects.
// jpeglib.h needs size_t and FILE declared before it.
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: the message codes (JWRN_JPEG_EOF)

#include <algorithm>
#include <csetjmp>

#include "data/pipeline/image_decode.h"
#include "engine/core/error.h"

namespace tandem::data {
namespace {

struct ErrorManager {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;  // the data ended before the rows asked for (libjpeg's JWRN_JPEG_EOF)
};

void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings still give an image, as TurboJPEG's decoder without TJFLAG_STOPONWARNING does, and are
// not printed; a premature end of the data is noted for the caller's policy.
void on_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    reinterpret_cast<ErrorManager*>(cinfo->err)->truncated = true;
  }
}

struct Decompressor {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  bool ready = false;
  Decompressor() {
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_error;
    err.mgr.emit_message = on_message;
    if (setjmp(err.jump) == 0) {
      jpeg_create_decompress(&cinfo);
      ready = true;
    }
  }
  ~Decompressor() {
    if (ready) jpeg_destroy_decompress(&cinfo);
  }
};

// What one decode asks and gets; trivially destructible, so it may live in the setjmp frame.
struct RegionJob {
  const unsigned char* data;
  unsigned long size;
  int channels;
  JpegScale scale;
  PixelSpan want;
  Image* out;
  ImageOrigin* origin;
};

// Rows and columns decoded beyond the wanted span on each side, one iMCU: libjpeg-turbo aligns a
// crop to iMCU columns anyway, and chroma upsampling reads a neighbour on each side, so a span
// well inside the decoded region comes out as a full decode gives it.
void decoded_span(const jpeg_decompress_struct& c, const PixelSpan& want, PixelSpan* got) {
  const int mcu_w = c.max_h_samp_factor * c.min_DCT_scaled_size;
  const int mcu_h = c.max_v_samp_factor * c.min_DCT_scaled_size;
  const int w = static_cast<int>(c.output_width), h = static_cast<int>(c.output_height);
  got->x_begin = std::clamp(want.x_begin - mcu_w, 0, w);
  got->x_end = std::clamp(want.x_end + mcu_w, got->x_begin, w);
  got->y_begin = std::clamp(want.y_begin - mcu_h, 0, h);
  got->y_end = std::clamp(want.y_end + mcu_h, got->y_begin, h);
}

// Reads the rows [span.y_begin, span.y_end) of the crop set up by the caller into job.out.
void read_rows(jpeg_decompress_struct* c, const PixelSpan& span, const RegionJob& job) {
  if (span.y_begin > 0) jpeg_skip_scanlines(c, static_cast<JDIMENSION>(span.y_begin));
  const size_t stride = static_cast<size_t>(job.out->width) * static_cast<size_t>(job.channels);
  for (int y = 0; y < job.out->height;) {
    JSAMPROW row = job.out->pixels.data() + static_cast<size_t>(y) * stride;
    y += static_cast<int>(jpeg_read_scanlines(c, &row, 1));
  }
}

// False (and the message in err) when libjpeg-turbo failed.
bool run(Decompressor& d, const RegionJob& job) {
  jpeg_decompress_struct* c = &d.cinfo;
  d.err.truncated = false;
  if (setjmp(d.err.jump) != 0) {
    jpeg_abort_decompress(c);
    return false;
  }
  jpeg_mem_src(c, job.data, job.size);
  jpeg_read_header(c, TRUE);
  c->out_color_space = job.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  c->scale_num = static_cast<unsigned int>(job.scale.num);
  c->scale_denom = static_cast<unsigned int>(job.scale.den);
  jpeg_start_decompress(c);
  const int full_w = static_cast<int>(c->output_width), full_h = static_cast<int>(c->output_height);
  PixelSpan span;
  decoded_span(*c, job.want, &span);
  JDIMENSION x = static_cast<JDIMENSION>(span.x_begin);
  JDIMENSION width = static_cast<JDIMENSION>(span.x_end - span.x_begin);
  if (width < c->output_width) jpeg_crop_scanline(c, &x, &width);  // moves x down, width up to iMCUs
  *job.origin = {static_cast<int>(x), span.y_begin, full_w, full_h};
  job.out->width = static_cast<int>(c->output_width);  // after the crop: the region's width
  job.out->height = span.y_end - span.y_begin;
  job.out->channels = job.channels;
  job.out->pixels.resize(static_cast<size_t>(job.out->width) * static_cast<size_t>(job.out->height) *
                         static_cast<size_t>(job.channels));
  read_rows(c, span, job);
  jpeg_abort_decompress(c);  // the rows below the region are not needed
  return true;
}

[[noreturn]] void throw_truncated(size_t bytes) {
  throw_error(ErrorCode::kDataLoss,
              "JPEG data ({} bytes) ends before the image does: a truncated file. TensorFlow's decode_jpeg refuses "
              "it too; data.image.accept_truncated_jpeg: true decodes it with the missing rows grey",
              bytes);
}

}  // namespace

void decode_jpeg_region(std::string_view bytes, int channels, JpegScale scale, const PixelSpan& want, Image* out,
                        ImageOrigin* origin, bool accept_truncated) {
  TANDEM_CHECK(channels == 1 || channels == 3, ErrorCode::kInvalidArgument,
               "decode_jpeg_region: channels {} (1 or 3)", channels);
  thread_local Decompressor decompressor;
  TANDEM_CHECK(decompressor.ready, ErrorCode::kInternal, "jpeg_create_decompress failed: {}",
               decompressor.err.message);
  // Checked on the whole file first, so the verdict does not depend on which rows a crop decodes.
  if (!accept_truncated && !jpeg_data_complete(bytes)) throw_truncated(bytes.size());
  RegionJob job{reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()),
                channels, scale, want, out, origin};
  if (!run(decompressor, job)) {
    throw_error(ErrorCode::kDataLoss, "JPEG decode ({} bytes): {}", bytes.size(), decompressor.err.message);
  }
  if (decompressor.err.truncated && !accept_truncated) throw_truncated(bytes.size());
}

}  // namespace tandem::data
