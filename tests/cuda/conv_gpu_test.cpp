// The cuDNN convolutions (forward with bias, data gradient, weight and bias gradients) against the
// CPU backend on the same random inputs, through ops.h as the engine calls them: both memory
// formats, odd sizes (batch 1, 3 and 5 channels, 7x7 planes and kernels, 1x1 planes), stride 2,
// padding, dilation 2, grouped and depthwise filters; heuristics and cudnn_benchmark; bitwise-equal
// repeated runs under deterministic; tf32 and bf16 within their tolerances; and a steady state in
// which a call allocates nothing but its outputs (no workspace growth, no staged copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/core/allocator.h"
#include "engine/core/context.h"
#include "engine/core/random.h"
#include "engine/core/tensor.h"
#include "tests/cuda/cuda_test_util.h"

namespace tandem::backend {
namespace {

const Device kGpu = Device::cuda(0);
const MemoryFormat kFormats[] = {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast};

// Tolerances by precision: max |got - want| over max |want| of the output.
constexpr double kFp32Tolerance = 1e-4;
constexpr double kTf32Tolerance = 1e-2;
constexpr double kBf16Tolerance = 3e-2;

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dParams p;
};

Conv2dParams params(int64_t stride, int64_t padding, int64_t dilation, int64_t groups) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  p.dilation = {dilation, dilation};
  p.groups = groups;
  return p;
}

std::vector<ConvCase> cases() {
  return {
      {"batch1_c3_k5_7x7_pad1", {1, 3, 7, 7}, {5, 3, 3, 3}, params(1, 1, 1, 1)},
      {"stride2_pad1", {2, 5, 9, 8}, {4, 5, 3, 3}, params(2, 1, 1, 1)},
      {"7x7_kernel_stride2_pad3", {2, 3, 15, 15}, {8, 3, 7, 7}, params(2, 3, 1, 1)},
      {"groups3", {2, 6, 8, 7}, {9, 2, 3, 3}, params(1, 1, 1, 3)},
      {"depthwise_stride2", {2, 5, 9, 9}, {5, 1, 3, 3}, params(2, 1, 1, 5)},
      {"dilation2", {1, 3, 11, 10}, {5, 3, 3, 3}, params(1, 2, 2, 1)},
      {"1x1_plane", {3, 5, 1, 1}, {7, 5, 1, 1}, params(1, 0, 1, 1)},
      {"1x1_kernel_stride2", {2, 8, 7, 7}, {16, 8, 1, 1}, params(2, 0, 1, 1)},
  };
}

std::vector<float> random_floats(int64_t n, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = g.uniform(-1.0f, 1.0f);
  return v;
}

// CPU inputs of a case, contiguous.
struct Inputs {
  Tensor x, w, b, dy;
};

Inputs make_inputs(const ConvCase& c, uint64_t seed) {
  Shape y = conv2d_output_shape(c.p, c.x, c.w);
  return {Tensor::from_vector(random_floats(c.x.numel(), seed), c.x),
          Tensor::from_vector(random_floats(c.w.numel(), seed + 1), c.w),
          Tensor::from_vector(random_floats(c.w[0], seed + 2), Shape{c.w[0]}),
          Tensor::from_vector(random_floats(y.numel(), seed + 3), y)};
}

// The inputs on ctx's device, activations in `format` (weights and bias stay contiguous).
Inputs place(const Inputs& in, ExecutionContext& ctx, MemoryFormat format) {
  auto act = [&](const Tensor& t) {
    return (format == MemoryFormat::kContiguous ? t : t.to_format(format)).to(ctx.device());
  };
  return {act(in.x), in.w.to(ctx.device()), in.b.to(ctx.device()), act(in.dy)};
}

struct Outputs {
  Tensor y, dx, dw, db;
};

Outputs run_ops(ExecutionContext& ctx, const ConvCase& c, const Inputs& on_device) {
  Outputs out;
  out.y = conv2d_forward(ctx, c.p, on_device.x, on_device.w, on_device.b);
  out.dx = conv2d_backward_data(ctx, c.p, on_device.dy, on_device.w, c.x);
  ConvWeightGrads g = conv2d_backward_weights(ctx, c.p, on_device.x, on_device.dy, c.w, true);
  out.dw = g.dw;
  out.db = g.db;
  return out;
}

// Logical-order values, read back to the host.
struct Values {
  std::vector<float> y, dx, dw, db;
};

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }

Values run(ExecutionContext& ctx, const ConvCase& c, const Inputs& in, MemoryFormat format) {
  Outputs out = run_ops(ctx, c, place(in, ctx, format));
  return {values(out.y), values(out.dx), values(out.dw), values(out.db)};
}

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                                 const char* what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": sizes " << got.size() << " and " << want.size();
  }
  double scale = 0.0, worst = 0.0;
  size_t worst_at = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= worst)) {  // also catches NaN
      worst = std::isnan(err) ? INFINITY : err;
      worst_at = i;
    }
  }
  if (worst <= tolerance * std::max(scale, 1e-6)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": element " << worst_at << " is " << got[worst_at] << ", want "
                                       << want[worst_at] << " (error " << worst << ", max |want| " << scale << ")";
}

void expect_close(const Values& got, const Values& want, double tolerance) {
  EXPECT_TRUE(close(got.y, want.y, tolerance, "y"));
  EXPECT_TRUE(close(got.dx, want.dx, tolerance, "dx"));
  EXPECT_TRUE(close(got.dw, want.dw, tolerance, "dw"));
  EXPECT_TRUE(close(got.db, want.db, tolerance, "db"));
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string trace(const ConvCase& c, MemoryFormat format) {
  return c.name + " x=" + c.x.str() + " w=" + c.w.str() + " " + std::string(memory_format_name(format));
}

struct Contexts {
  ExecutionContext cpu{Device::cpu(), 2, 1};
  ExecutionContext gpu{kGpu, 0, 1};
};

// Every case in both formats against the CPU backend (contiguous), under the GPU's options.
void check_all_cases(Contexts& ctx, double tolerance, int repeats = 1) {
  ContextBinding bind(ctx.gpu);  // copies without a stream go on the GPU context's stream
  uint64_t seed = 100;
  for (const ConvCase& c : cases()) {
    Inputs in = make_inputs(c, seed += 10);
    Values want = run(ctx.cpu, c, in, MemoryFormat::kContiguous);
    for (MemoryFormat format : kFormats) {
      SCOPED_TRACE(trace(c, format));
      for (int r = 0; r < repeats; ++r) expect_close(run(ctx.gpu, c, in, format), want, tolerance);
    }
  }
}

TEST(CudaConv, Fp32MatchesCpuInBothFormats) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  check_all_cases(ctx, kFp32Tolerance);
}

// dx_sum += backward data (a residual fork's gradient added into): the GPU's sum in both formats
// against the CPU backend's.
TEST(CudaConv, BackwardDataAddsIntoASumLikeCpu) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ContextBinding bind(ctx.gpu);
  uint64_t seed = 500;
  for (const ConvCase& c : cases()) {
    Inputs in = make_inputs(c, seed += 10);
    Tensor before = Tensor::from_vector(random_floats(c.x.numel(), seed + 5), c.x);
    Tensor want = before.clone();
    conv2d_backward_data_add(ctx.cpu, c.p, in.dy, in.w, want);
    for (MemoryFormat format : kFormats) {
      SCOPED_TRACE(trace(c, format));
      Inputs on_gpu = place(in, ctx.gpu, format);
      Tensor sum = (format == MemoryFormat::kContiguous ? before : before.to_format(format)).to(kGpu);
      conv2d_backward_data_add(ctx.gpu, c.p, on_gpu.dy, on_gpu.w, sum);
      EXPECT_TRUE(close(values(sum), values(want), kFp32Tolerance, "dx_sum"));
    }
  }
}

// The first call of each problem times the algorithms (cudnnFind*AlgorithmEx), the second reuses
// the choice: both must be right.
TEST(CudaConv, CudnnBenchmarkMatchesCpu) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ctx.gpu.options().cudnn_benchmark = true;
  check_all_cases(ctx, kFp32Tolerance, 2);
}

TEST(CudaConv, Tf32WithinItsTolerance) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ctx.gpu.options().precision = Precision::kTf32;
  check_all_cases(ctx, kTf32Tolerance);
}

TEST(CudaConv, Bf16WithinItsTolerance) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ctx.gpu.options().precision = Precision::kBf16;
  check_all_cases(ctx, kBf16Tolerance);
}

// Both backends in bf16 round the same operands the same way (to nearest even) and accumulate in
// f32: they differ by the GPU's bf16 staging of its outputs (half a bf16 ulp, 2e-3 relative) and
// the order of the sums, far inside the 3e-2 that separates either from f32.
TEST(CudaConv, Bf16MatchesTheCpusBf16) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ctx.cpu.options().precision = Precision::kBf16;
  ctx.gpu.options().precision = Precision::kBf16;
  check_all_cases(ctx, 1e-2);
}

TEST(CudaConv, Bf16WithCudnnBenchmarkWithinItsTolerance) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ctx.gpu.options().precision = Precision::kBf16;
  ctx.gpu.options().cudnn_benchmark = true;
  check_all_cases(ctx, kBf16Tolerance, 2);
}

// Shapes large enough that cuDNN's atomics-based gradient algorithms would be candidates.
std::vector<ConvCase> deterministic_cases() {
  return {
      {"c32_k32_14x14", {8, 32, 14, 14}, {32, 32, 3, 3}, params(1, 1, 1, 1)},
      {"grouped_stride2", {4, 16, 15, 15}, {24, 4, 3, 3}, params(2, 1, 1, 4)},
  };
}

void check_deterministic(KernelOptions options, double tolerance) {
  Contexts ctx;
  ctx.gpu.options() = options;
  ContextBinding bind(ctx.gpu);
  uint64_t seed = 500;
  for (const ConvCase& c : deterministic_cases()) {
    Inputs in = make_inputs(c, seed += 10);
    Values want = run(ctx.cpu, c, in, MemoryFormat::kContiguous);
    for (MemoryFormat format : kFormats) {
      SCOPED_TRACE(trace(c, format));
      Values first = run(ctx.gpu, c, in, format);
      Values second = run(ctx.gpu, c, in, format);
      expect_close(first, want, tolerance);
      EXPECT_TRUE(bitwise_equal(first.y, second.y));
      EXPECT_TRUE(bitwise_equal(first.dx, second.dx));
      EXPECT_TRUE(bitwise_equal(first.dw, second.dw));
      EXPECT_TRUE(bitwise_equal(first.db, second.db));
    }
  }
}

TEST(CudaConv, DeterministicRunsAreBitwiseEqual) {
  TANDEM_REQUIRE_GPU();
  KernelOptions options;
  options.deterministic = true;
  check_deterministic(options, kFp32Tolerance);
}

TEST(CudaConv, DeterministicWithCudnnBenchmarkAndBf16RunsAreBitwiseEqual) {
  TANDEM_REQUIRE_GPU();
  KernelOptions options;
  options.deterministic = true;
  options.cudnn_benchmark = true;
  options.precision = Precision::kBf16;
  check_deterministic(options, kBf16Tolerance);
}

// Once a problem has run, another call of it makes no allocation but its outputs (y, dx, dw, db
// from ops.h): the plan is cached, and neither the workspace nor any staged copy grows.
TEST(CudaConv, SecondCallOfAShapeAllocatesOnlyItsOutputs) {
  TANDEM_REQUIRE_GPU();
  KernelOptions fp32, bf16_benchmark, tf32_deterministic;
  bf16_benchmark.precision = Precision::kBf16;
  bf16_benchmark.cudnn_benchmark = true;
  tf32_deterministic.precision = Precision::kTf32;
  tf32_deterministic.deterministic = true;
  for (const KernelOptions& options : {fp32, bf16_benchmark, tf32_deterministic}) {
    for (MemoryFormat format : kFormats) {
      ConvCase c = cases()[2];  // 7x7 kernel, stride 2
      SCOPED_TRACE(trace(c, format) + " precision " + std::string(precision_name(options.precision)));
      Contexts ctx;
      ctx.gpu.options() = options;
      ContextBinding bind(ctx.gpu);
      Inputs on_gpu = place(make_inputs(c, 900), ctx.gpu, format);
      run_ops(ctx.gpu, c, on_gpu);  // plans, algorithm timing, workspace growth
      run_ops(ctx.gpu, c, on_gpu);  // the outputs' blocks are now cached too
      AllocatorStats before = ctx.gpu.allocator().stats();
      run_ops(ctx.gpu, c, on_gpu);
      AllocatorStats after = ctx.gpu.allocator().stats();
      EXPECT_EQ(after.system_allocations, before.system_allocations);
      EXPECT_EQ(after.allocations - before.allocations, 4);  // y, dx, dw, db
      EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
      EXPECT_EQ(after.peak_bytes_in_use, before.peak_bytes_in_use);
    }
  }
}

// A batch of zero: cuDNN takes no zero-sized tensor, the kernels answer without it.
TEST(CudaConv, EmptyBatchGivesEmptyOutputsAndZeroGradients) {
  TANDEM_REQUIRE_GPU();
  Contexts ctx;
  ContextBinding bind(ctx.gpu);
  ConvCase c{"empty_batch", {0, 3, 7, 7}, {5, 3, 3, 3}, params(1, 1, 1, 1)};
  Inputs on_gpu = place(make_inputs(c, 7), ctx.gpu, MemoryFormat::kContiguous);
  Outputs out = run_ops(ctx.gpu, c, on_gpu);
  EXPECT_EQ(out.y.numel(), 0);
  EXPECT_EQ(out.dx.numel(), 0);
  EXPECT_EQ(values(out.dw), std::vector<float>(static_cast<size_t>(c.w.numel()), 0.0f));
  EXPECT_EQ(values(out.db), std::vector<float>(static_cast<size_t>(c.w[0]), 0.0f));
}

}  // namespace
}  // namespace tandem::backend
