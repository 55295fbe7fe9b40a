// The CUDA kernel-table entries of scaled_dot_product_attention, on (B, H, T, D) tensors and on the
// packed projection (B, T, 3 H D), and which kernels run them:
//  - precision: bf16, no mask, head size 64 or 128, sm_80 or newer: the tensor-core kernels
//    (cuda_flash_bf16_*.cu) on bf16 copies of q, k, v and dy made in one pass each, or on the packed
//    qkv in place when it is bf16 already (a linear layer's bf16 output), writing y in bf16 when asked;
//  - head sizes 16, 32, 48 and 64: the f32 tiled kernels (cuda_attention.cu);
//  - anything else on (B, H, T, D): the unfused path (cuda_attention_unfused.cu); the packed entries
//    are not offered (packed_attention_supported) and ops.h splits the heads instead.
// The f32 kernels on a bf16 packed qkv or y widen qkv into the workspace and round y after.
// TANDEM_CUDA_ATTENTION=f32 keeps the f32 kernels under bf16; =unfused forces the unfused path.
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <string_view>

#include "engine/backend/cuda/cuda_attention_common.cuh"
#include "engine/backend/cuda/cuda_cast.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/cuda_context.h"
#include "engine/backend/cuda/cuda_kernels.h"

namespace tandem::backend::cuda {
namespace {

using tandem::cuda::CudaContext;

enum class Path { kUnfused, kF32, kBf16 };

constexpr int64_t kMaxTiledLength = int64_t{65535} * 32;

// The device's compute capability, asked once per context.
struct DeviceArch {
  int major = -1;
};

int arch_major(CudaContext& cc) {
  DeviceArch& arch = cc.state<DeviceArch>();
  if (arch.major < 0) {
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&arch.major, cudaDevAttrComputeCapabilityMajor, cc.device()), "device={}",
                      cc.device());
  }
  return arch.major;
}

// TANDEM_CUDA_ATTENTION: unset or "auto", "f32" or "unfused".
std::string_view forced_path() {
  const char* value = std::getenv("TANDEM_CUDA_ATTENTION");
  const std::string_view choice = value == nullptr ? "auto" : value;
  TANDEM_CHECK(choice == "auto" || choice == "f32" || choice == "unfused", ErrorCode::kInvalidArgument,
               "TANDEM_CUDA_ATTENTION is '{}': use auto (the default), f32 (no tensor cores) or unfused", choice);
  return choice;
}

Path choose(CudaContext& cc, const AttnLayout& a, bool masked) {
  const std::string_view forced = forced_path();
  // The tiled kernels' grids: heads on x (up to 2^31 - 1), row tiles of 32 or more on y (up to 65535).
  const bool fits = a.heads <= INT32_MAX && a.tq <= kMaxTiledLength && a.tk <= kMaxTiledLength;
  if (forced == "unfused" || a.d != a.dv || !fits) return Path::kUnfused;
  if (forced == "auto" && cc.options().precision == Precision::kBf16 && !masked && flash_bf16_head_size(a.d) &&
      arch_major(cc) >= 8) {
    return Path::kBf16;
  }
  return flash_f32_head_size(a.d) ? Path::kF32 : Path::kUnfused;
}

constexpr size_t kAlign = 256;

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Pieces of the context's workspace, taken in order: f32 delta rows, then bf16 copies.
class Workspace {
 public:
  Workspace(CudaContext& cc, size_t bytes) : cc_(cc), base_(static_cast<char*>(cc.workspace(bytes))) {}
  float* floats(int64_t n) { return static_cast<float*>(take(sizeof(float) * static_cast<size_t>(n))); }
  // A bf16 copy of n f32 values, cast on the context's stream.
  void* bf16_copy(const float* src, int64_t n) {
    void* dst = take(2 * static_cast<size_t>(n));
    cast_f32_to_bf16(src, dst, n, cc_.stream());
    return dst;
  }
  // An f32 copy of n bf16 values.
  const float* f32_copy(const void* src_bf16, int64_t n) {
    float* dst = floats(n);
    cast_bf16_to_f32(src_bf16, dst, n, cc_.stream());
    return dst;
  }
  static size_t floats_bytes(int64_t n) { return aligned(sizeof(float) * static_cast<size_t>(n)); }
  static size_t bf16_bytes(int64_t n) { return aligned(2 * static_cast<size_t>(n)); }

 private:
  void* take(size_t bytes) {
    void* p = base_ + used_;
    used_ += aligned(bytes);
    return p;
  }
  CudaContext& cc_;
  char* base_;
  size_t used_ = 0;
};

const void* offset_bf16(const void* base, int64_t elements) { return static_cast<const char*>(base) + 2 * elements; }

bool is_bf16(const Tensor& t) { return t.dtype() == DType::kBF16; }

// packed_attention_supported said yes for the head size; the length can still be beyond the grids.
void check_packed(Path path, const AttnLayout& a) {
  TANDEM_CHECK(path != Path::kUnfused, ErrorCode::kInvalidArgument,
               "packed attention: {} heads of {} positions (head size {}) exceed the kernels' limits ({} positions); "
               "split the sequence",
               a.heads, a.tq, a.d, kMaxTiledLength);
}

AttnLayout base_layout(const AttentionParams& p, int64_t heads, int64_t h, int64_t tq, int64_t tk, int64_t d,
                       int64_t dv) {
  AttnLayout a{};
  a.heads = heads;
  a.h = h;
  a.tq = tq;
  a.tk = tk;
  a.d = d;
  a.dv = dv;
  a.scale = p.scale;
  a.causal = p.causal;
  a.dropout_p = p.dropout_p;
  a.keep_scale = p.dropout_p < 1.0f ? 1.0f / (1.0f - p.dropout_p) : 0.0f;
  a.seed = p.dropout_seed;
  return a;
}

FlashBf16Args forward_args(const AttnLayout& a, const void* q, const void* k, const void* v, Tensor& y, Tensor& lse) {
  FlashBf16Args f{};
  f.a = a;
  f.q = q;
  f.k = k;
  f.v = v;
  if (is_bf16(y)) {
    f.y16 = y.raw_data();
  } else {
    f.y = y.data<float>();
  }
  f.lse = lse.data<float>();
  return f;
}

FlashBf16Args backward_args(const AttnLayout& a, const void* q, const void* k, const void* v, const void* dy,
                            const Tensor& lse, const float* delta, float* dq, float* dk, float* dv) {
  FlashBf16Args f{};
  f.a = a;
  f.q = q;
  f.k = k;
  f.v = v;
  f.dy = dy;
  f.saved_lse = lse.data<float>();
  f.delta = delta;
  f.dq = dq;
  f.dk = dk;
  f.dv = dv;
  return f;
}

}  // namespace

AttnLayout attn_layout(const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask) {
  AttnLayout a = base_layout(p, q.dim(0) * q.dim(1), q.dim(1), q.dim(2), k.dim(2), q.dim(3), v.dim(3));
  a.qs = {a.h * a.tq * a.d, a.tq * a.d, a.d};
  a.ks = {a.h * a.tk * a.d, a.tk * a.d, a.d};
  a.vs = {a.h * a.tk * a.dv, a.tk * a.dv, a.dv};
  a.ys = {a.h * a.tq * a.dv, a.tq * a.dv, a.dv};
  if (mask.defined()) {
    a.mask = mask.data<float>();
    a.mask_h_stride = mask.dim(1) == 1 ? 0 : a.tq * a.tk;
    a.mask_b_stride = mask.dim(0) == 1 ? 0 : mask.dim(1) * a.tq * a.tk;
  }
  return a;
}

AttnLayout packed_attn_layout(const AttentionParams& p, int64_t heads, const Tensor& qkv) {
  const int64_t t = qkv.dim(1), c = qkv.dim(2) / 3, d = c / heads;
  AttnLayout a = base_layout(p, qkv.dim(0) * heads, heads, t, t, d, d);
  a.qs = a.ks = a.vs = {3 * t * c, d, 3 * c};
  a.ys = {t * c, d, c};
  return a;
}

void attention_forward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, Tensor& y, Tensor& lse) {
  const AttnLayout a = attn_layout(p, q, k, v, mask);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  switch (choose(cc, a, mask.defined())) {
    case Path::kUnfused:
      return attention_forward_unfused(ctx, p, q, k, v, mask, y, lse);
    case Path::kF32:
      return flash_f32_forward(a, q.data<float>(), k.data<float>(), v.data<float>(), y.data<float>(), lse.data<float>(),
                               cc.stream());
    case Path::kBf16: {
      Workspace ws(cc, Workspace::bf16_bytes(q.numel()) + 2 * Workspace::bf16_bytes(k.numel()));
      const void* q16 = ws.bf16_copy(q.data<float>(), q.numel());
      const void* k16 = ws.bf16_copy(k.data<float>(), k.numel());
      const void* v16 = ws.bf16_copy(v.data<float>(), v.numel());
      const FlashBf16Args f = forward_args(a, q16, k16, v16, y, lse);
      return flash_bf16_forward(f, cc.stream());
    }
  }
}

void attention_backward(Ctx& ctx, const AttentionParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& mask, const Tensor& y, const Tensor& lse, const Tensor& dy, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  const AttnLayout a = attn_layout(p, q, k, v, mask);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Path path = choose(cc, a, mask.defined());
  if (path == Path::kUnfused) return attention_backward_unfused(ctx, p, q, k, v, mask, y, lse, dy, dq, dk, dv);
  size_t bytes = Workspace::floats_bytes(a.heads * a.tq);
  if (path == Path::kBf16) {
    bytes +=
        Workspace::bf16_bytes(q.numel()) + 2 * Workspace::bf16_bytes(k.numel()) + Workspace::bf16_bytes(dy.numel());
  }
  Workspace ws(cc, bytes);
  float* delta = ws.floats(a.heads * a.tq);
  launch_attention_delta(a, y.data<float>(), false, dy.data<float>(), delta, cc.stream());
  if (path == Path::kF32) {
    return flash_f32_backward(a,
                              {q.data<float>(), k.data<float>(), v.data<float>(), dy.data<float>(), lse.data<float>(),
                               delta, dq.data<float>(), dk.data<float>(), dv.data<float>()},
                              cc.stream());
  }
  const void* q16 = ws.bf16_copy(q.data<float>(), q.numel());
  const void* k16 = ws.bf16_copy(k.data<float>(), k.numel());
  const void* v16 = ws.bf16_copy(v.data<float>(), v.numel());
  const void* dy16 = ws.bf16_copy(dy.data<float>(), dy.numel());
  const FlashBf16Args f =
      backward_args(a, q16, k16, v16, dy16, lse, delta, dq.data<float>(), dk.data<float>(), dv.data<float>());
  flash_bf16_backward(f, cc.stream());
}

bool packed_attention_supported(Ctx& ctx, const AttentionParams& p, int64_t head_dim) {
  AttnLayout a{};
  a.heads = 1;
  a.d = a.dv = head_dim;
  a.dropout_p = p.dropout_p;
  return choose(tandem::cuda::cuda_context(ctx), a, false) != Path::kUnfused;
}

namespace {

// The f32 kernels on the packed projection: a bf16 qkv is widened into the workspace, and a bf16 y
// is written there in f32 and rounded after.
void packed_f32_forward(CudaContext& cc, const AttnLayout& a, const Tensor& qkv, Tensor& y, Tensor& lse) {
  const bool wide_in = is_bf16(qkv), round_out = is_bf16(y);
  Workspace ws(cc, (wide_in ? Workspace::floats_bytes(qkv.numel()) : 0) +
                       (round_out ? Workspace::floats_bytes(y.numel()) : 0));
  const float* base = wide_in ? ws.f32_copy(qkv.raw_data(), qkv.numel()) : qkv.data<float>();
  float* y32 = round_out ? ws.floats(y.numel()) : y.data<float>();
  const int64_t c = a.h * a.d;
  flash_f32_forward(a, base, base + c, base + 2 * c, y32, lse.data<float>(), cc.stream());
  if (round_out) cast_f32_to_bf16(y32, y.raw_data(), y.numel(), cc.stream());
}

}  // namespace

void packed_attention_forward(Ctx& ctx, const AttentionParams& p, int64_t heads, const Tensor& qkv, Tensor& y,
                              Tensor& lse) {
  const AttnLayout a = packed_attn_layout(p, heads, qkv);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Path path = choose(cc, a, false);
  check_packed(path, a);
  if (path == Path::kF32) return packed_f32_forward(cc, a, qkv, y, lse);
  const int64_t c = a.h * a.d;
  Workspace ws(cc, is_bf16(qkv) ? 0 : Workspace::bf16_bytes(qkv.numel()));
  const void* packed = is_bf16(qkv) ? qkv.raw_data() : ws.bf16_copy(qkv.data<float>(), qkv.numel());
  const FlashBf16Args f = forward_args(a, packed, offset_bf16(packed, c), offset_bf16(packed, 2 * c), y, lse);
  flash_bf16_forward(f, cc.stream());
}

void packed_attention_backward(Ctx& ctx, const AttentionParams& p, int64_t heads, const Tensor& qkv, const Tensor& y,
                               const Tensor& lse, const Tensor& dy, Tensor& dqkv) {
  const AttnLayout a = packed_attn_layout(p, heads, qkv);
  CudaContext& cc = tandem::cuda::cuda_context(ctx);
  const Path path = choose(cc, a, false);
  check_packed(path, a);
  const int64_t c = a.h * a.d;
  const bool qkv16 = is_bf16(qkv);
  size_t bytes = Workspace::floats_bytes(a.heads * a.tq);
  if (path == Path::kBf16) {
    bytes += (qkv16 ? 0 : Workspace::bf16_bytes(qkv.numel())) + Workspace::bf16_bytes(dy.numel());
  } else if (qkv16) {
    bytes += Workspace::floats_bytes(qkv.numel());
  }
  Workspace ws(cc, bytes);
  float* delta = ws.floats(a.heads * a.tq);
  launch_attention_delta(a, y.raw_data(), is_bf16(y), dy.data<float>(), delta, cc.stream());
  float* grad = dqkv.data<float>();
  if (path == Path::kF32) {
    const float* base = qkv16 ? ws.f32_copy(qkv.raw_data(), qkv.numel()) : qkv.data<float>();
    return flash_f32_backward(
        a, {base, base + c, base + 2 * c, dy.data<float>(), lse.data<float>(), delta, grad, grad + c, grad + 2 * c},
        cc.stream());
  }
  const void* packed = qkv16 ? qkv.raw_data() : ws.bf16_copy(qkv.data<float>(), qkv.numel());
  const void* dy16 = ws.bf16_copy(dy.data<float>(), dy.numel());
  const FlashBf16Args f = backward_args(a, packed, offset_bf16(packed, c), offset_bf16(packed, 2 * c), dy16, lse, delta,
                                        grad, grad + c, grad + 2 * c);
  flash_bf16_backward(f, cc.stream());
}

}  // namespace tandem::backend::cuda
