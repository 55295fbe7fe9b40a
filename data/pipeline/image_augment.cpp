// Augmentation kernels. Resizing uses 11-bit fixed-point weights from per-column tables, so
// the inner loop is integer multiply-adds that the compiler can keep in registers.
#include "data/pipeline/image_augment.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/error.h"

namespace tandem::data {
namespace {

constexpr int kFracBits = 11;
constexpr int kOne = 1 << kFracBits;

struct Tap {
  int index;   // first source pixel
  int weight;  // of the second pixel, in [0, kOne]
};

// For each destination position, the two source positions (clamped into the box) and weight.
std::vector<Tap> taps(float start, float length, int src_size, int dst_size) {
  std::vector<Tap> out(static_cast<size_t>(dst_size));
  float step = length / static_cast<float>(dst_size);
  float lo = std::max(0.0f, std::floor(start));
  float hi = std::min(static_cast<float>(src_size - 1), std::ceil(start + length) - 1);
  for (int i = 0; i < dst_size; ++i) {
    float s = std::clamp(start + (static_cast<float>(i) + 0.5f) * step - 0.5f, lo, std::max(lo, hi));
    int i0 = std::min(static_cast<int>(s), src_size - 1);
    float frac = s - static_cast<float>(i0);
    out[static_cast<size_t>(i)] = {i0, static_cast<int>(std::lround(frac * kOne))};
  }
  return out;
}

template <int C>
void resize_rows(const Image& src, const std::vector<Tap>& xs, const std::vector<Tap>& ys, int dst_w, uint8_t* dst) {
  const int last_x = src.width - 1;
  for (size_t y = 0; y < ys.size(); ++y) {
    const uint8_t* r0 = src.row(ys[y].index);
    const uint8_t* r1 = src.row(std::min(ys[y].index + 1, src.height - 1));
    const int wy = ys[y].weight;
    uint8_t* out = dst + y * static_cast<size_t>(dst_w) * C;
    for (int x = 0; x < dst_w; ++x) {
      const int x0 = xs[static_cast<size_t>(x)].index;
      const int x1 = std::min(x0 + 1, last_x);
      const int wx = xs[static_cast<size_t>(x)].weight;
      for (int c = 0; c < C; ++c) {
        int top = r0[x0 * C + c] * (kOne - wx) + r0[x1 * C + c] * wx;
        int bottom = r1[x0 * C + c] * (kOne - wx) + r1[x1 * C + c] * wx;
        out[x * C + c] = static_cast<uint8_t>((top * (kOne - wy) + bottom * wy + (1 << (2 * kFracBits - 1))) >>
                                              (2 * kFracBits));
      }
    }
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

void resize_bilinear(const Image& src, const CropBox& box, bool flip, int dst_w, int dst_h, uint8_t* dst) {
  std::vector<Tap> xs = taps(box.x, box.width, src.width, dst_w);
  std::vector<Tap> ys = taps(box.y, box.height, src.height, dst_h);
  if (flip) std::reverse(xs.begin(), xs.end());
  switch (src.channels) {
    case 1: resize_rows<1>(src, xs, ys, dst_w, dst); break;
    case 3: resize_rows<3>(src, xs, ys, dst_w, dst); break;
    case 4: resize_rows<4>(src, xs, ys, dst_w, dst); break;
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
    for (size_t i = 0; i < plane; ++i) {
      float v = static_cast<float>(src[i * channels + c]) * scale + shift;
      dst[chw ? c * plane + i : i * channels + c] = v;
    }
  }
}

void hwc_to_chw(const uint8_t* src, int width, int height, int channels, uint8_t* dst) {
  const size_t plane = static_cast<size_t>(width) * height;
  for (size_t i = 0; i < plane; ++i) {
    for (int c = 0; c < channels; ++c) dst[c * plane + i] = src[i * channels + c];
  }
}

}  // namespace tandem::data
