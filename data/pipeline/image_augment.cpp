// Augmentation kernels. Resizing uses 11-bit fixed-point weights from per-column tables, so
// the inner loop is integer multiply-adds that the compiler can keep in registers.
#include "data/pipeline/image_augment.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/core/error.h"

namespace tandem::data {
namespace {

constexpr int kFracBits = 11;
constexpr int kOne = 1 << kFracBits;

struct Tap {
  int i0;      // first source pixel
  int i1;      // second source pixel: i0 + 1, or i0 at the image's last pixel
  int weight;  // of the second pixel, in [0, kOne]
};

// For each destination position, the two source positions (clamped into the box and the full
// image) and the weight, then moved by `origin` into the coordinates of a decoded region.
std::vector<Tap> taps(float start, float length, int src_size, int dst_size, int origin) {
  std::vector<Tap> out(static_cast<size_t>(dst_size));
  float step = length / static_cast<float>(dst_size);
  float lo = std::max(0.0f, std::floor(start));
  float hi = std::min(static_cast<float>(src_size - 1), std::ceil(start + length) - 1);
  for (int i = 0; i < dst_size; ++i) {
    float s = std::clamp(start + (static_cast<float>(i) + 0.5f) * step - 0.5f, lo, std::max(lo, hi));
    int i0 = std::min(static_cast<int>(s), src_size - 1);
    float frac = s - static_cast<float>(i0);
    out[static_cast<size_t>(i)] = {i0 - origin, std::min(i0 + 1, src_size - 1) - origin,
                                   static_cast<int>(std::lround(frac * kOne))};
  }
  return out;
}

// One source row blended horizontally, p[i0] * (kOne - w) + p[i1] * w (as p[i0] * kOne +
// (p[i1] - p[i0]) * w) per destination column and channel: exact in 32 bits, so blending the rows
// afterwards gives what blending each pixel's four neighbours at once gave, bit for bit.
template <int C>
void blend_row(const uint8_t* row, const Tap* xs, size_t count, int32_t* out) {
  for (size_t x = 0; x < count; ++x) {
    const uint8_t* a = row + static_cast<ptrdiff_t>(xs[x].i0) * C;
    const uint8_t* b = row + static_cast<ptrdiff_t>(xs[x].i1) * C;
    const int w = xs[x].weight;
    for (int c = 0; c < C; ++c) out[c] = (a[c] << kFracBits) + (b[c] - a[c]) * w;
    out += C;
  }
}

// Three channels, the common case: each tap's pixel pair is interleaved into 16-bit lanes and
// pmaddwd multiplies by (kOne - w, w) and adds, for all channels at once. A pixel is read as 4
// bytes and each tap stores 4 lanes (out needs one spare lane at the end); a tap that reaches the
// row's last pixel, whose 4th byte may lie past the buffer, takes the plain path.
void blend_row3(const uint8_t* row, int width, const Tap* xs, size_t count, int32_t* out) {
#if defined(__SSE2__)
  const __m128i zero = _mm_setzero_si128();
  for (size_t x = 0; x < count; ++x, out += 3) {
    const Tap& t = xs[x];
    if (t.i1 >= width - 1) {
      blend_row<3>(row, &t, 1, out);
      continue;
    }
    int32_t a = 0, b = 0;
    std::memcpy(&a, row + static_cast<ptrdiff_t>(t.i0) * 3, 4);
    std::memcpy(&b, row + static_cast<ptrdiff_t>(t.i1) * 3, 4);
    __m128i pairs = _mm_unpacklo_epi8(_mm_unpacklo_epi8(_mm_cvtsi32_si128(a), _mm_cvtsi32_si128(b)), zero);
    __m128i weights = _mm_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(t.weight) << 16) |
                                                          static_cast<uint32_t>(kOne - t.weight)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_madd_epi16(pairs, weights));
  }
#else
  (void)width;
  blend_row<3>(row, xs, count, out);
#endif
}

// Two blended rows into output bytes, exactly as (top * (kOne - w) + bottom * w + half) >> 22.
[[gnu::always_inline]] inline void blend_rows_loop(const int32_t* top, const int32_t* bottom, int w, size_t n,
                                                   uint8_t* dst) {
  constexpr int kRound = 1 << (2 * kFracBits - 1);
  for (size_t k = 0; k < n; ++k) {
    dst[k] = static_cast<uint8_t>(((top[k] << kFracBits) + (bottom[k] - top[k]) * w + kRound) >> (2 * kFracBits));
  }
}

// The same loop built for AVX2, taken where the CPU has it: it is 32-bit multiplies, which SSE2
// (the x86-64 baseline) lacks. Chosen by a flag, not by target_clones: an ifunc resolver runs
// before the sanitizers' runtimes start, and crashes sanitizer builds.
#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx2")]] void blend_rows_avx2(const int32_t* top, const int32_t* bottom, int w, size_t n,
                                             uint8_t* dst) {
  blend_rows_loop(top, bottom, w, n, dst);
}
#endif

void blend_rows(const int32_t* top, const int32_t* bottom, int w, size_t n, uint8_t* dst) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    blend_rows_avx2(top, bottom, w, n, dst);
    return;
  }
#endif
  blend_rows_loop(top, bottom, w, n, dst);
}

// Separable: each source row the output needs is blended horizontally once (two kept, as
// consecutive output rows mostly share theirs), then each output row blends two of them.
template <int C>
void resize_rows(const Image& src, const std::vector<Tap>& xs, const std::vector<Tap>& ys, uint8_t* dst) {
  const size_t n = xs.size() * C;
  thread_local std::vector<int32_t> buffer;
  buffer.resize(2 * (n + 1));  // a spare lane per row for blend_row3
  int32_t* rows[2] = {buffer.data(), buffer.data() + n + 1};
  int held[2] = {-1, -1};
  // The blended row i, computed unless held; never evicts the row `keep`.
  auto blended = [&](int i, int keep) -> const int32_t* {
    for (int k = 0; k < 2; ++k) {
      if (held[k] == i) return rows[k];
    }
    int k = held[0] == keep ? 1 : 0;
    if constexpr (C == 3) {
      blend_row3(src.row(i), src.width, xs.data(), xs.size(), rows[k]);
    } else {
      blend_row<C>(src.row(i), xs.data(), xs.size(), rows[k]);
    }
    held[k] = i;
    return rows[k];
  };
  for (const Tap& y : ys) {
    const int32_t* top = blended(y.i0, y.i1);
    const int32_t* bottom = blended(y.i1, y.i0);
    blend_rows(top, bottom, y.weight, n, dst);
    dst += n;
  }
}

}  // namespace

CropBox random_resized_crop_box(int width, int height, const RandomResizedCropRange& range, Generator& rng) {
  const float area = static_cast<float>(width) * static_cast<float>(height);
  const float log_lo = std::log(range.ratio_min), log_hi = std::log(range.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    float target = area * rng.uniform(range.scale_min, range.scale_max);
    float aspect = std::exp(rng.uniform(log_lo, log_hi));
    int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= width && h <= height) {
      auto x = static_cast<float>(rng.below(static_cast<uint64_t>(width - w + 1)));
      auto y = static_cast<float>(rng.below(static_cast<uint64_t>(height - h + 1)));
      return {x, y, static_cast<float>(w), static_cast<float>(h)};
    }
  }
  float in_ratio = static_cast<float>(width) / static_cast<float>(height);
  float w = static_cast<float>(width), h = static_cast<float>(height);
  if (in_ratio < range.ratio_min) {
    h = std::round(w / range.ratio_min);
  } else if (in_ratio > range.ratio_max) {
    w = std::round(h * range.ratio_max);
  }
  return {(static_cast<float>(width) - w) / 2, (static_cast<float>(height) - h) / 2, w, h};
}

PixelSpan resize_source_span(int full_width, int full_height, const CropBox& box, int dst_w, int dst_h) {
  auto span = [](const std::vector<Tap>& t, int* begin, int* end) {
    *begin = t.front().i0;
    *end = t.front().i1 + 1;
    for (const Tap& x : t) {
      *begin = std::min(*begin, x.i0);
      *end = std::max(*end, x.i1 + 1);
    }
  };
  PixelSpan out;
  span(taps(box.x, box.width, full_width, dst_w, 0), &out.x_begin, &out.x_end);
  span(taps(box.y, box.height, full_height, dst_h, 0), &out.y_begin, &out.y_end);
  return out;
}

void resize_bilinear(const Image& src, const CropBox& box, bool flip, int dst_w, int dst_h, uint8_t* dst) {
  resize_bilinear(src, ImageOrigin{0, 0, src.width, src.height}, box, flip, dst_w, dst_h, dst);
}

void resize_bilinear(const Image& src, const ImageOrigin& origin, const CropBox& box, bool flip, int dst_w, int dst_h,
                     uint8_t* dst) {
  std::vector<Tap> xs = taps(box.x, box.width, origin.full_width, dst_w, origin.x);
  std::vector<Tap> ys = taps(box.y, box.height, origin.full_height, dst_h, origin.y);
  if (flip) std::reverse(xs.begin(), xs.end());
  switch (src.channels) {
    case 1: resize_rows<1>(src, xs, ys, dst); break;
    case 3: resize_rows<3>(src, xs, ys, dst); break;
    case 4: resize_rows<4>(src, xs, ys, dst); break;
    default:
      throw_error(ErrorCode::kInvalidArgument, "resize_bilinear: {} channels (1, 3 or 4)", src.channels);
  }
}

void crop_with_padding(const Image& src, int padding, int dx, int dy, bool flip, uint8_t* dst) {
  const int w = src.width, h = src.height, c = src.channels;
  for (int y = 0; y < h; ++y) {
    int sy = y + dy - padding;
    uint8_t* out = dst + static_cast<size_t>(y) * w * c;
    for (int x = 0; x < w; ++x) {
      int sx = (flip ? w - 1 - x : x) + dx - padding;
      uint8_t* px = out + static_cast<size_t>(x) * c;
      if (sy < 0 || sy >= h || sx < 0 || sx >= w) {
        std::memset(px, 0, static_cast<size_t>(c));
      } else {
        std::memcpy(px, src.row(sy) + static_cast<size_t>(sx) * c, static_cast<size_t>(c));
      }
    }
  }
}

void normalize(const uint8_t* src, int width, int height, int channels, const std::array<float, 3>& mean,
               const std::array<float, 3>& std, bool chw, float* dst) {
  const size_t plane = static_cast<size_t>(width) * height;
  for (int c = 0; c < channels; ++c) {
    const float scale = 1.0f / (255.0f * std[static_cast<size_t>(c)]);
    const float shift = -mean[static_cast<size_t>(c)] / std[static_cast<size_t>(c)];
    // A byte has 256 values: each one's result, computed as it always was, then looked up.
    std::array<float, 256> table;
    for (int v = 0; v < 256; ++v) table[static_cast<size_t>(v)] = static_cast<float>(v) * scale + shift;
    float* out = chw ? dst + static_cast<size_t>(c) * plane : dst + c;
    const size_t step = chw ? 1 : static_cast<size_t>(channels);
    const uint8_t* in = src + c;
    for (size_t i = 0; i < plane; ++i) out[i * step] = table[in[i * static_cast<size_t>(channels)]];
  }
}

void hwc_to_chw(const uint8_t* src, int width, int height, int channels, uint8_t* dst) {
  const size_t plane = static_cast<size_t>(width) * height;
  for (size_t i = 0; i < plane; ++i) {
    for (int c = 0; c < channels; ++c) dst[c * plane + i] = src[i * channels + c];
  }
}

}  // namespace tandem::data
