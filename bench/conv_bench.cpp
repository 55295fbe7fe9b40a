// Convolution forward + backward (data and weights) through the ops.h entry points for the
// distinct convolution shapes of ResNet-20 (CIFAR, batch 128) and ResNet-50's first stage
// (batch 32, 56x56), in NCHW and NHWC, as GFLOP/s beside the oneDNN f32 matmul rate
// (1024^3) measured in the same run. Prints a summary table with each layer's ratio at the end.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/ops.h"

namespace {

using tandem::Device;
using tandem::ExecutionContext;
using tandem::MemoryFormat;
using tandem::Shape;
using tandem::Tensor;
namespace backend = tandem::backend;

struct ConvShape {
  const char* name;
  int64_t n, c, hw, k, r, stride, pad;
};

// ResNet-20 (He et al. 2016, CIFAR variant; projection shortcuts as 1x1 stride-2 convolutions).
const ConvShape kShapes[] = {
    {"r20_stem_3to16_32x32", 128, 3, 32, 16, 3, 1, 1},
    {"r20_s1_16to16_32x32", 128, 16, 32, 16, 3, 1, 1},
    {"r20_s2_16to32_3x3s2", 128, 16, 32, 32, 3, 2, 1},
    {"r20_s2_proj_16to32_1x1s2", 128, 16, 32, 32, 1, 2, 0},
    {"r20_s2_32to32_16x16", 128, 32, 16, 32, 3, 1, 1},
    {"r20_s3_32to64_3x3s2", 128, 32, 16, 64, 3, 2, 1},
    {"r20_s3_proj_32to64_1x1s2", 128, 32, 16, 64, 1, 2, 0},
    {"r20_s3_64to64_8x8", 128, 64, 8, 64, 3, 1, 1},
    // ResNet-50 conv2_x (batch 32, 56x56); its projection 64 -> 256 has the shape of the 1x1 expand.
    {"r50_1x1_64to64_56x56", 32, 64, 56, 64, 1, 1, 0},
    {"r50_3x3_64to64_56x56", 32, 64, 56, 64, 3, 1, 1},
    {"r50_1x1_64to256_56x56", 32, 64, 56, 256, 1, 1, 0},
    {"r50_1x1_256to64_56x56", 32, 256, 56, 64, 1, 1, 0},
};

std::mutex results_mutex;
double matmul_gflops = 0.0;
std::vector<std::pair<std::string, double>> conv_gflops;  // in registration order, last (longest) run

Tensor filled(ExecutionContext& ctx, const Shape& s, MemoryFormat format, float value) {
  Tensor t = Tensor::empty(s, tandem::DType::kF32, Device::cpu(), format);
  backend::fill(ctx, value, t);
  return t;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void BM_Matmul1024(benchmark::State& state) {
  ExecutionContext ctx(Device::cpu());
  Tensor a = filled(ctx, {1024, 1024}, MemoryFormat::kContiguous, 0.01f);
  Tensor b = filled(ctx, {1024, 1024}, MemoryFormat::kContiguous, 0.02f);
  backend::matmul(ctx, a, b);  // plan and warm up
  double flops = 2.0 * 1024 * 1024 * 1024;
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(backend::matmul(ctx, a, b));
  double rate = flops * static_cast<double>(state.iterations()) / seconds_since(start) / 1e9;
  state.counters["GFLOP/s"] = rate;
  std::lock_guard lock(results_mutex);
  matmul_gflops = rate;
}

void BM_Conv(benchmark::State& state, const std::string& name, ConvShape s, MemoryFormat format) {
  ExecutionContext ctx(Device::cpu());
  backend::Conv2dParams p;
  p.stride = {s.stride, s.stride};
  p.padding = {s.pad, s.pad};
  Shape xs{s.n, s.c, s.hw, s.hw}, ws{s.k, s.c, s.r, s.r};
  Shape ys = backend::conv2d_output_shape(p, xs, ws);
  Tensor x = filled(ctx, xs, format, 0.01f);
  Tensor w = filled(ctx, ws, MemoryFormat::kContiguous, 0.02f);
  Tensor dy = filled(ctx, ys, format, 0.03f);
  auto step = [&] {
    benchmark::DoNotOptimize(backend::conv2d_forward(ctx, p, x, w));
    benchmark::DoNotOptimize(backend::conv2d_backward_data(ctx, p, dy, w, xs));
    benchmark::DoNotOptimize(backend::conv2d_backward_weights(ctx, p, x, dy, ws, false));
  };
  step();  // plans are made here, not in the timed loop
  double flops = 3.0 * 2.0 * static_cast<double>(ys.numel()) * static_cast<double>(s.c * s.r * s.r);
  auto start = std::chrono::steady_clock::now();
  for (auto _ : state) step();
  double rate = flops * static_cast<double>(state.iterations()) / seconds_since(start) / 1e9;
  state.counters["GFLOP/s"] = rate;
  std::lock_guard lock(results_mutex);
  if (matmul_gflops > 0) state.counters["x_matmul"] = rate / matmul_gflops;
  auto it = std::find_if(conv_gflops.begin(), conv_gflops.end(), [&](const auto& e) { return e.first == name; });
  if (it == conv_gflops.end()) {
    conv_gflops.emplace_back(name, rate);
  } else {
    it->second = rate;
  }
}

void register_all() {
  benchmark::RegisterBenchmark("matmul_f32_1024", BM_Matmul1024)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (const ConvShape& s : kShapes) {
    for (MemoryFormat f : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
      std::string name = std::string("conv_fwd_bwd/") + s.name + (f == MemoryFormat::kContiguous ? "/nchw" : "/nhwc");
      benchmark::RegisterBenchmark(name.c_str(), BM_Conv, name, s, f)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
}

void print_summary() {
  std::printf("\n| layer (fwd + bwd data + bwd weights) | GFLOP/s | ratio to matmul |\n|---|---:|---:|\n");
  std::printf("| oneDNN f32 matmul 1024x1024x1024 | %.1f | 1.00 |\n", matmul_gflops);
  for (const auto& [name, rate] : conv_gflops) {
    std::printf("| %s | %.1f | %.2f |\n", name.c_str(), rate, matmul_gflops > 0 ? rate / matmul_gflops : 0.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_summary();
  return 0;
}
