// The CUDA attention kernels (cuda_flash_bf16_forward.cu, cuda_flash_bf16_backward.cu on the
// tensor cores; cuda_attention.cu's f32 kernels and delta rows), their real source compiled as host
// C++ and run by the CPU emulator (emulator.h), against a double-precision reference: y, lse, dq, dk
// and dv within bf16's tolerance (f32's for the f32 kernels), for head sizes 64 and 128, lengths that
// are not multiples of the 64-row tiles, Tq != Tk both ways (queries that see no key), causal and
// not, dropout, the (B, H, T, D) and the packed (B, T, 3 H D) layouts. Each problem runs twice, with
// cp.async copies landing when issued and when waited for (their destination NaN until then): the
// results must agree to the bit, which also shows the kernels deterministic. A packed forward asked
// for a bf16 y writes the f32 y rounded, and the row term reads it.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/cuda_emul/emul_test_util.h"

namespace tandem::emul_test {
namespace {

using backend::cuda::F32AttentionGrads;
using backend::cuda::FlashBf16Args;

// bf16 operands and bf16 probabilities (P, dS) into f32 accumulators: errors relative to the
// tensor's largest value stay near 2^-8 (measured here: at most 3.3e-3, the probes' dq aside); 1e-2
// leaves room for the hardware's own summation order without letting a wrongly masked tile pass.
constexpr double kBf16Tolerance = 1e-2;
constexpr double kF32Tolerance = 1e-4;

struct Errors {
  double y, lse, delta, dq, dk, dv;
};

// Every output, in storage layout, and the emulator's work counters of the run.
struct RunResult {
  Outputs out;
  tandem_emul::Counters work;
  double seconds;
};

Errors compare(const Problem& p, const Outputs& got, const Outputs& want) {
  const AttnLayout a = p.layout();
  const std::vector<float>& dk_got = p.packed ? got.dq : got.dk;
  const std::vector<float>& dk_want = p.packed ? want.dq : want.dk;
  const std::vector<float>& dv_got = p.packed ? got.dq : got.dv;
  const std::vector<float>& dv_want = p.packed ? want.dq : want.dv;
  return {layout_error(got.y, want.y, a.ys, a.heads, a.h, a.tq, a.d, 0), row_error(got.lse, want.lse),
          row_error(got.delta, want.delta),
          layout_error(got.dq, want.dq, a.qs, a.heads, a.h, a.tq, a.d, 0),
          layout_error(dk_got, dk_want, a.ks, a.heads, a.h, a.tk, a.d, p.k_offset()),
          layout_error(dv_got, dv_want, a.vs, a.heads, a.h, a.tk, a.d, p.v_offset())};
}

// The probes' k rows share one large component (about -1 in every column, or rising from -1 to 1
// over the keys): dq = scale dS K sums dS over keys, where that component cancels (each row of dS
// sums to about 0) and leaves the rounding of dS to bf16 some 8 times the size of the result (the
// f32 kernels show the same factor at their precision). Their y, lse, dk and dv, where a leaked key
// shows, keep the tolerance.
double dq_tolerance(const Problem& p, double tolerance) {
  return p.scores == Scores::kRandom ? tolerance : 3 * tolerance;
}

void expect_within(const Problem& p, const Errors& e, double tolerance, const std::string& what) {
  EXPECT_LT(e.y, tolerance) << what << ": y";
  EXPECT_LT(e.lse, tolerance) << what << ": lse";
  EXPECT_LT(e.delta, tolerance) << what << ": delta";
  EXPECT_LT(e.dq, dq_tolerance(p, tolerance)) << what << ": dq";
  EXPECT_LT(e.dk, tolerance) << what << ": dk";
  EXPECT_LT(e.dv, tolerance) << what << ": dv";
  std::printf("  %-26s y %.1e  lse %.1e  delta %.1e  dq %.1e  dk %.1e  dv %.1e\n", what.c_str(), e.y, e.lse, e.delta,
              e.dq, e.dk, e.dv);
}

template <typename T>
void expect_canaries(const DeviceBuffer<T>& b, const char* name) {
  EXPECT_TRUE(b.canaries_intact()) << name << ": a kernel wrote outside the buffer";
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits(v[i]);
  return out;
}

template <typename T>
std::unique_ptr<DeviceBuffer<T>> upload(const std::vector<T>& v) {
  auto b = std::make_unique<DeviceBuffer<T>>(v.size());
  std::copy(v.begin(), v.end(), b->data());
  return b;
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float widen(uint16_t bits) {
  const uint32_t u = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The forward, delta and backward launches in the order the dispatch makes them
// (cuda_attention_dispatch.cu), on "device" buffers; outputs start as NaN so that an element no
// kernel writes is caught.
RunResult run(const Problem& p, const Inputs& in, bool bf16) {
  const AttnLayout a = p.layout();
  tandem_emul::reset_counters();
  const auto start = std::chrono::steady_clock::now();
  auto q = upload(in.q), k = upload(p.packed ? std::vector<float>(1) : in.k),
       v = upload(p.packed ? std::vector<float>(1) : in.v), dy = upload(in.dy);
  DeviceBuffer<float> y(p.y_elements(), kNaN), lse(static_cast<size_t>(a.heads * a.tq), kNaN),
      delta(static_cast<size_t>(a.heads * a.tq), kNaN), dq(p.q_elements(), kNaN),
      dk(std::max<size_t>(p.kv_elements(), 1), kNaN), dv(std::max<size_t>(p.kv_elements(), 1), kNaN);
  const float* k_base = p.packed ? q->data() + p.k_offset() : k->data();
  const float* v_base = p.packed ? q->data() + p.v_offset() : v->data();
  float* dk_base = p.packed ? dq.data() + p.k_offset() : dk.data();
  float* dv_base = p.packed ? dq.data() + p.v_offset() : dv.data();
  if (bf16) {
    // The dispatch's bf16 copies: of q, k and v (of all qkv when packed) and of dy.
    auto q16 = upload(to_bf16(in.q)), k16 = upload(to_bf16(p.packed ? std::vector<float>(1) : in.k)),
         v16 = upload(to_bf16(p.packed ? std::vector<float>(1) : in.v)), dy16 = upload(to_bf16(in.dy));
    const void* k16_base = p.packed ? static_cast<const void*>(q16->data() + p.k_offset()) : k16->data();
    const void* v16_base = p.packed ? static_cast<const void*>(q16->data() + p.v_offset()) : v16->data();
    // By field name, as the dispatch fills them (forward_args, backward_args).
    FlashBf16Args f{};
    f.a = a;
    f.q = q16->data();
    f.k = k16_base;
    f.v = v16_base;
    f.y = y.data();
    f.lse = lse.data();
    backend::cuda::flash_bf16_forward(f, nullptr);
    backend::cuda::launch_attention_delta(a, y.data(), false, dy->data(), delta.data(), nullptr);
    f = FlashBf16Args{};
    f.a = a;
    f.q = q16->data();
    f.k = k16_base;
    f.v = v16_base;
    f.dy = dy16->data();
    f.saved_lse = lse.data();
    f.delta = delta.data();
    f.dq = dq.data();
    f.dk = dk_base;
    f.dv = dv_base;
    backend::cuda::flash_bf16_backward(f, nullptr);
    for (const auto* b : {q16.get(), k16.get(), v16.get(), dy16.get()}) expect_canaries(*b, "bf16 input");
  } else {
    backend::cuda::flash_f32_forward(a, q->data(), k_base, v_base, y.data(), lse.data(), nullptr);
    backend::cuda::launch_attention_delta(a, y.data(), false, dy->data(), delta.data(), nullptr);
    backend::cuda::flash_f32_backward(
        a,
        F32AttentionGrads{q->data(), k_base, v_base, dy->data(), lse.data(), delta.data(), dq.data(), dk_base, dv_base},
        nullptr);
  }
  for (const auto* b : {&y, &lse, &delta, &dq, &dk, &dv}) expect_canaries(*b, "output");
  RunResult r;
  r.out = {y.values(), lse.values(), delta.values(), dq.values(), p.packed ? std::vector<float>{} : dk.values(),
           p.packed ? std::vector<float>{} : dv.values()};
  r.work = tandem_emul::counters();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

bool same_bits(const Outputs& x, const Outputs& y) {
  auto eq = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  return eq(x.y, y.y) && eq(x.lse, y.lse) && eq(x.delta, y.delta) && eq(x.dq, y.dq) && eq(x.dk, y.dk) &&
         eq(x.dv, y.dv);
}

class FlashBf16EmulTest : public ::testing::TestWithParam<Problem> {};
class FlashF32EmulTest : public ::testing::TestWithParam<Problem> {};

TEST_P(FlashBf16EmulTest, MatchesReferenceInBothCopyModes) {
  const Problem& p = GetParam();
  const Inputs in = make_inputs(p, 7);
  const Outputs want = reference(p, in);
  tandem_emul::set_copy_mode(tandem_emul::CopyMode::kDeferred);
  const RunResult deferred = run(p, in, true);
  tandem_emul::set_copy_mode(tandem_emul::CopyMode::kEager);
  const RunResult eager = run(p, in, true);
  tandem_emul::set_copy_mode(tandem_emul::CopyMode::kDeferred);
  std::printf(
      "%s: %.2f s per run, %llu blocks, %llu mma, %llu ldmatrix, %llu cp.async\n", p.name().c_str(), deferred.seconds,
      static_cast<unsigned long long>(deferred.work.blocks), static_cast<unsigned long long>(deferred.work.mma),
      static_cast<unsigned long long>(deferred.work.ldmatrix), static_cast<unsigned long long>(deferred.work.copies));
  EXPECT_GT(deferred.work.mma, 0u) << "the tensor-core kernels did not run";
  EXPECT_GT(deferred.work.ldmatrix, 0u);
  expect_within(p, compare(p, deferred.out, want), kBf16Tolerance, "bf16, copies at the wait");
  expect_within(p, compare(p, eager.out, want), kBf16Tolerance, "bf16, copies at issue");
  EXPECT_TRUE(same_bits(deferred.out, eager.out)) << "the results depend on when cp.async copies land";
}

TEST_P(FlashF32EmulTest, MatchesReferenceAndRepeats) {
  const Problem& p = GetParam();
  ASSERT_TRUE(backend::cuda::flash_f32_head_size(p.d));
  const Inputs in = make_inputs(p, 7);
  const Outputs want = reference(p, in);
  const RunResult first = run(p, in, false), second = run(p, in, false);
  EXPECT_EQ(first.work.mma, 0u);
  expect_within(p, compare(p, first.out, want), kF32Tolerance, "f32");
  EXPECT_TRUE(same_bits(first.out, second.out)) << "two runs differ";
}

// The packed forward asked for a bf16 y (FlashBf16Args::y16, a GPT's attention under bf16): every
// element the f32 y of the same launch rounded to nearest even, the same lse, nothing written outside
// the buffer; the backward's row term reads that bf16 y as its widened values.
void expect_bf16_y(const Problem& p) {
  ASSERT_TRUE(p.packed);
  const AttnLayout a = p.layout();
  const Inputs in = make_inputs(p, 9);
  auto qkv16 = upload(to_bf16(in.q));
  auto dy = upload(in.dy);
  DeviceBuffer<float> y(p.y_elements(), kNaN), lse(static_cast<size_t>(a.heads * a.tq), kNaN),
      lse16(static_cast<size_t>(a.heads * a.tq), kNaN), delta(static_cast<size_t>(a.heads * a.tq), kNaN);
  DeviceBuffer<uint16_t> y16(p.y_elements(), 0x7fc1);  // a NaN that no rounding gives
  FlashBf16Args f{};
  f.a = a;
  f.q = qkv16->data();
  f.k = qkv16->data() + p.k_offset();
  f.v = qkv16->data() + p.v_offset();
  f.y = y.data();
  f.lse = lse.data();
  backend::cuda::flash_bf16_forward(f, nullptr);
  f.y = nullptr;
  f.y16 = y16.data();
  f.lse = lse16.data();
  backend::cuda::flash_bf16_forward(f, nullptr);
  expect_canaries(y16, "bf16 y");
  const std::vector<float> y32 = y.values();
  const std::vector<uint16_t> got = y16.values();
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != bf16_bits(y32[i]);
  EXPECT_EQ(wrong, 0u) << "of " << got.size() << " bf16 y values, not the f32 y rounded";
  EXPECT_EQ(std::memcmp(lse.data(), lse16.data(), lse.size() * sizeof(float)), 0) << "lse differs";

  backend::cuda::launch_attention_delta(a, y16.data(), true, dy->data(), delta.data(), nullptr);
  std::vector<float> want(delta.size());
  for (int64_t bh = 0; bh < a.heads; ++bh) {
    for (int64_t i = 0; i < a.tq; ++i) {
      const int64_t row = backend::cuda::head_row(a.ys, a.h, bh, i);
      double sum = 0.0;
      for (int64_t c = 0; c < a.dv; ++c) sum += static_cast<double>(widen(got[row + c])) * in.dy[row + c];
      want[bh * a.tq + i] = static_cast<float>(sum);
    }
  }
  EXPECT_LT(row_error(delta.values(), want), 1e-5) << "the row term of the bf16 y";
}

TEST(FlashBf16EmulBf16Y, IsTheF32YRoundedAndTheRowTermReadsIt) {
  expect_bf16_y({2, 2, 130, 130, 64, true, 0.2f, true});
  expect_bf16_y({2, 2, 70, 70, 128, false, 0.0f, true});
}

// B = 2, H = 2 throughout. Lengths 70 and 130 leave partial 64-row tiles (and 32-row ones); 127
// leaves 63 and 31 rows, where a tail mask off by a few keys would show. The probes (Scores) make
// one key too many dominate its row, which random scores would hide inside the tolerance; their
// causal offsets Tk - Tq = 62 (a tile whose last key is the first one hidden) and lengths 65 and
// 129 (a last visible key that starts a tile) are where off-by-one tile rules go wrong.
const Problem kProblems[] = {
    {2, 2, 70, 70, 64, false, 0.0f, false},
    {2, 2, 130, 130, 64, true, 0.2f, true},
    {2, 2, 70, 70, 128, true, 0.0f, true},
    {2, 2, 130, 130, 128, false, 0.2f, false},
    {2, 2, 40, 100, 64, true, 0.0f, false},
    {2, 2, 40, 100, 128, true, 0.2f, false},
    {2, 2, 100, 40, 64, true, 0.2f, false},
    {2, 2, 127, 127, 64, false, 0.0f, false, Scores::kNegative},
    {2, 2, 127, 127, 128, false, 0.2f, true, Scores::kNegative},
    {2, 2, 70, 132, 64, true, 0.0f, false, Scores::kIncreasing},
    {2, 2, 40, 102, 128, true, 0.0f, false, Scores::kIncreasing},
    {2, 2, 65, 65, 64, true, 0.2f, true, Scores::kIncreasing},
    {2, 2, 129, 129, 128, true, 0.0f, true, Scores::kIncreasing},
};

std::string problem_name(const ::testing::TestParamInfo<Problem>& param_info) { return param_info.param.name(); }

std::vector<Problem> f32_problems() {
  std::vector<Problem> out;
  for (const Problem& p : kProblems) {
    if (backend::cuda::flash_f32_head_size(p.d)) out.push_back(p);  // head sizes up to 64
  }
  // The f32 kernels' other head sizes: 48 (two threads per backward row, as 64) and 32 and 16 (one).
  for (const Problem& p : {Problem{2, 2, 70, 70, 48, true, 0.2f, false}, Problem{2, 2, 40, 100, 48, true, 0.0f, false},
                           Problem{2, 2, 70, 70, 32, false, 0.0f, true}, Problem{2, 2, 33, 33, 16, true, 0.2f, false}}) {
    out.push_back(p);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Problems, FlashBf16EmulTest, ::testing::ValuesIn(kProblems), problem_name);
INSTANTIATE_TEST_SUITE_P(Problems, FlashF32EmulTest, ::testing::ValuesIn(f32_problems()), problem_name);

}  // namespace
}  // namespace tandem::emul_test
