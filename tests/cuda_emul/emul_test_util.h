// What the emulator tests share: "device" buffers the kernels may read (registered with the
// emulator, fenced by canaries that catch out-of-bounds writes), bf16 rounding, and a plain
// double-precision reference of scaled_dot_product_attention with AttnLayout's strides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <ostream>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_attention_common.cuh"

namespace tandem::emul_test {

using backend::cuda::AttnLayout;
using backend::cuda::HeadStrides;

// A 256-byte aligned allocation (as cudaMalloc's), registered with the emulator as global memory,
// with canary bytes on both sides that canaries_intact() checks.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n, T fill = T{}) : n_(n) {
    bytes_ = (n * sizeof(T) + kAlign - 1) / kAlign * kAlign;
    raw_ = static_cast<unsigned char*>(::operator new (bytes_ + 2 * kAlign, std::align_val_t{kAlign}));
    std::memset(raw_, kCanary, kAlign);
    std::memset(raw_ + kAlign + n * sizeof(T), kCanary, bytes_ - n * sizeof(T) + kAlign);
    for (size_t i = 0; i < n; ++i) data()[i] = fill;
    tandem_emul::register_global(data(), n * sizeof(T));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    tandem_emul::unregister_global(data());
    ::operator delete (raw_, std::align_val_t{kAlign});
  }
  T* data() { return reinterpret_cast<T*>(raw_ + kAlign); }
  const T* data() const { return reinterpret_cast<const T*>(raw_ + kAlign); }
  size_t size() const { return n_; }
  std::vector<T> values() const { return {data(), data() + n_}; }
  bool canaries_intact() const {
    for (size_t i = 0; i < kAlign; ++i) {
      if (raw_[i] != kCanary) return false;
    }
    for (size_t i = kAlign + n_ * sizeof(T); i < bytes_ + 2 * kAlign; ++i) {
      if (raw_[i] != kCanary) return false;
    }
    return true;
  }

 private:
  static constexpr size_t kAlign = 256;
  static constexpr unsigned char kCanary = 0xa5;
  size_t n_, bytes_;
  unsigned char* raw_;
};

// Round to nearest even, as CUDA's f32 -> bf16 cast (no NaN among our inputs).
uint16_t bf16_bits(float v);
float bf16_round(float v);

// How q and k are drawn. Random scores barely notice one key too many or too few; the probes make
// such a key dominate its row: kNegative gives every real key a score near -sqrt(D), so that a
// zero-filled padding key (score 0) that leaks past the tail mask takes nearly all the weight;
// kIncreasing makes scores rise with the key index, so that a key past the causal diagonal that
// leaks outweighs every visible one.
enum class Scores { kRandom, kNegative, kIncreasing };

// One attention problem: (B, H) heads, Tq queries, Tk keys, head size D, in the contiguous
// (B, H, T, D) layout or the packed projection (B, T, 3 H D) with y (B, T, H D) (then Tq == Tk).
struct Problem {
  int64_t b, h, tq, tk, d;
  bool causal;
  float dropout;
  bool packed;
  Scores scores = Scores::kRandom;
  uint64_t seed = 1234;

  AttnLayout layout() const;
  // Elements of each storage buffer: q, k and v (all three in one buffer when packed), and y.
  size_t q_elements() const;
  size_t kv_elements() const;
  size_t y_elements() const;
  // Where q, k and v start in their buffers (packed: columns 0, H D, 2 H D of one buffer).
  int64_t k_offset() const { return packed ? h * d : 0; }
  int64_t v_offset() const { return packed ? 2 * h * d : 0; }
  std::string name() const;
};
// GoogleTest prints a test's parameter by this (in test names and failures).
inline void PrintTo(const Problem& p, std::ostream* os) { *os << p.name(); }

// Inputs as the test holds them: bf16-representable f32 values, so that the f32 and bf16 kernels
// and the reference all see the same numbers. Packed, q holds the whole qkv buffer.
struct Inputs {
  std::vector<float> q, k, v, dy;  // packed: q holds the whole qkv buffer; k and v are empty
};
Inputs make_inputs(const Problem& p, uint32_t seed);

// Results in the kernels' storage layout (y by a.ys, dq/dk/dv by a.qs/ks/vs); lse and delta (the
// backward's row sums of dy y) are (B H, Tq).
struct Outputs {
  std::vector<float> y, lse, delta, dq, dk, dv;  // packed: dq holds the whole dqkv buffer; dk, dv empty
};
Outputs reference(const Problem& p, const Inputs& in);

// max |got - want| over the elements the layout addresses (`rows` rows of `cols` columns per head,
// from offset `base` of the storage, strides s), divided by max |want|; +inf for a NaN (an element
// no kernel wrote). row_error: the same over (B H, Tq) rows, where a reference -inf (the lse of a
// query that sees no key) must be -inf exactly.
double layout_error(const std::vector<float>& got, const std::vector<float>& want, const HeadStrides& s, int64_t heads,
                    int64_t h, int64_t rows, int64_t cols, int64_t base);
double row_error(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace tandem::emul_test
