// Convolutions as im2col + matmul (cpu_conv_gemm.h). The patch matrix has one row per output pixel
// and one column per weight of a filter, in the weights' own order: (c, r, s) for oihw weights,
// (r, s, c) for ohwi ones, so the weights are the matmul's operand as they lie, without a copy.
#include "engine/backend/cpu/cpu_conv_gemm.h"

#include <algorithm>
#include <cstring>

#include "engine/backend/cpu/cpu_bf16.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/parallel.h"

namespace tandem::backend::cpu {
namespace {

// The geometry of one convolution, in the terms the patch loops use.
struct Patches {
  int64_t n, c, h, w;     // input
  int64_t oh, ow;         // output plane
  int64_t r, s;           // kernel
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t channel_step, tap_step;  // column of (c, tap) = c * channel_step + tap * tap_step
  int64_t rows() const { return n * oh * ow; }
  int64_t cols() const { return c * r * s; }
};

Patches patches(const Conv2dParams& p, const Shape& x, const Shape& w, const Shape& y, MemoryFormat w_format) {
  Patches g{x[0], x[1], x[2], x[3], y[2], y[3], w[2], w[3], p.stride[0], p.stride[1], p.padding[0],
            p.padding[1], p.dilation[0], p.dilation[1], 0, 0};
  const bool ohwi = w_format == MemoryFormat::kChannelsLast;
  g.channel_step = ohwi ? 1 : g.r * g.s;
  g.tap_step = ohwi ? g.c : 1;
  return g;
}

// Each image's rows of the patch matrix; T is float or the bits of a bf16.
template <typename T>
void im2col(const Patches& g, const T* x, T* cols, int threads) {
  const int64_t k = g.cols();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        T* row = cols + ((n * g.oh + oy) * g.ow + ox) * k;
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t iy = oy * g.sh - g.ph + r * g.dh;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t ix = ox * g.sw - g.pw + s * g.dw;
            T* out = row + (r * g.s + s) * g.tap_step;
            const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
            const T* in = inside ? x + ((n * g.h + iy) * g.w + ix) * g.c : nullptr;  // padding: zeros
            if (g.channel_step == 1) {
              if (inside) std::memcpy(out, in, static_cast<size_t>(g.c) * sizeof(T));
              else std::memset(out, 0, static_cast<size_t>(g.c) * sizeof(T));
            } else {
              for (int64_t c = 0; c < g.c; ++c) out[c * g.channel_step] = inside ? in[c] : T{};
            }
          }
        }
      }
    }
  }
}

// dx (+)= the patches' gradients added back where they were taken from, image by image (the
// images' regions are disjoint, so the threads never write the same element).
void col2im(const Patches& g, const float* dcols, float* dx, bool add, int threads) {
  const int64_t k = g.cols();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t n = 0; n < g.n; ++n) {
    float* image = dx + n * g.h * g.w * g.c;
    if (!add) std::memset(image, 0, static_cast<size_t>(g.h * g.w * g.c) * sizeof(float));
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const float* row = dcols + ((n * g.oh + oy) * g.ow + ox) * k;
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t iy = oy * g.sh - g.ph + r * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t ix = ox * g.sw - g.pw + s * g.dw;
            if (ix < 0 || ix >= g.w) continue;
            const float* in = row + (r * g.s + s) * g.tap_step;
            float* out = image + (iy * g.w + ix) * g.c;
            for (int64_t c = 0; c < g.c; ++c) out[c] += in[c * g.channel_step];
          }
        }
      }
    }
  }
}

// The threads of im2col and col2im, which take an image each.
int image_threads(const Ctx& ctx, const Patches& g) {
  return std::max(1, std::min<int>(thread_budget(ctx), static_cast<int>(g.n)));
}

// The patch matrix of x: bf16 when the products are (from x's bf16 copy where x is f32), else f32.
Tensor patch_matrix(Ctx& ctx, const Patches& g, const Tensor& x_in, bool bf16) {
  const int threads = image_threads(ctx, g);
  if (bf16) {
    const Tensor x = bf16_of(ctx, x_in);
    Tensor cols = Tensor::empty(Shape({g.rows(), g.cols()}), DType::kBF16, ctx.device());
    im2col(g, static_cast<const uint16_t*>(x.raw_data()), static_cast<uint16_t*>(cols.raw_data()), threads);
    return cols;
  }
  Tensor cols = Tensor::empty(Shape({g.rows(), g.cols()}), DType::kF32, ctx.device());
  im2col(g, x_in.data<float>(), cols.data<float>(), threads);
  return cols;
}

// A tensor's bytes seen as a (rows, cols) row-major matrix.
Tensor as_matrix(const Tensor& t, int64_t rows, int64_t cols) {
  return t.view(Shape({rows, cols}), MemoryFormat::kContiguous);
}

// The largest output plane (OH * OW) given to the matmul form: 4x4. Measured in ResNet-18's step
// (64x64 inputs, batch 32) on an AMX Xeon: bf16 245 -> 116-129 ms, fp32 190 -> 133-154 ms; 8x8
// planes gained nothing more in bf16 and lost in fp32 (to the Winograd kernels), and ResNet-20's
// 7x7 planes lost in bf16 (108 -> 128 ms).
constexpr int64_t kLargestPlane = 4 * 4;

// Past this many elements the patch matrix is a memory cost the direct kernels do not have.
constexpr int64_t kLargestPatchMatrix = int64_t{1} << 26;

}  // namespace

bool conv_gemm_suits(const Conv2dParams& p, const Tensor& x, const Shape& w, const Tensor& y) {
  const Shape& ys = y.shape();
  if (p.groups != 1 || x.dim(1) != w[1] || x.numel() == 0 || y.numel() == 0) return false;
  if (x.format() != MemoryFormat::kChannelsLast || y.format() != MemoryFormat::kChannelsLast) return false;
  const int64_t plane = ys[2] * ys[3];
  return plane <= kLargestPlane && ys[0] * plane * w[1] * w[2] * w[3] <= kLargestPatchMatrix;
}

void conv_gemm_forward(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& w, const Tensor& b,
                       Tensor& y) {
  const Patches g = patches(p, x.shape(), w.shape(), y.shape(), w.format());
  const Tensor cols = patch_matrix(ctx, g, x, computes_in_bf16(ctx));
  Tensor y2 = as_matrix(y, g.rows(), w.dim(0));
  linear_forward(ctx, cols, as_matrix(w, w.dim(0), g.cols()), b, y2);  // (M, CRS) (CRS, K) + (1, K)
}

void conv_gemm_backward_data(Ctx& ctx, const Conv2dParams& p, const Tensor& dy, const Tensor& w, Tensor& dx,
                             bool add) {
  const Patches g = patches(p, dx.shape(), w.shape(), dy.shape(), w.format());
  Tensor dcols = Tensor::empty(Shape({g.rows(), g.cols()}), DType::kF32, ctx.device());
  linear_backward_data(ctx, as_matrix(dy, g.rows(), w.dim(0)), as_matrix(w, w.dim(0), g.cols()), dcols);
  col2im(g, dcols.data<float>(), dx.data<float>(), add, image_threads(ctx, g));
}

void conv_gemm_backward_weights(Ctx& ctx, const Conv2dParams& p, const Tensor& x, const Tensor& dy, Tensor& dw,
                                Tensor& db) {
  const Patches g = patches(p, x.shape(), dw.shape(), dy.shape(), dw.format());
  const Tensor cols = patch_matrix(ctx, g, x, computes_in_bf16(ctx));
  Tensor dw2 = as_matrix(dw, dw.dim(0), g.cols());
  linear_backward_weights(ctx, cols, as_matrix(dy, g.rows(), dw.dim(0)), dw2, db);  // (K, M) (M, CRS)
}

}  // namespace tandem::backend::cpu
