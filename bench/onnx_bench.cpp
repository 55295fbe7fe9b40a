// ONNX export as a capability to measure: exports a registry model (random weights and batch-norm
// statistics, fixed seeds), writes a random input batch and Tandem's eval-forward logits for it,
// and times the export and Tandem's eval forward on the CPU or a GPU. The reference, onnxruntime on
// the same file and input, runs beside it: bench/onnx_ort_bench.js (CPU, node) or
// bench/onnx_ort_bench.py (CUDA execution provider); bench/run_onnx_bench.sh pairs them.
//   onnx_bench --out DIR [--model resnet50] [--batch 32] [--input-size 224] [--classes 1000]
//              [--device cpu|cuda] [--iters 10] [--warmup 2]
// Writes DIR/model.onnx, DIR/input.bin (f32 NCHW), DIR/tandem_logits.bin (f32) and prints one JSON line.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "engine/backend/plugin_loader.h"
#include "engine/core/context.h"
#include "engine/export/onnx_export.h"
#include "models/registry.h"

namespace {

using tandem::Device;
using tandem::Tensor;

struct Options {
  std::string out, model = "resnet50", device = "cpu";
  int64_t batch = 32, input_size = 224, classes = 1000, iters = 10, warmup = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--out") o.out = value;
    else if (key == "--model") o.model = value;
    else if (key == "--device") o.device = value;
    else if (key == "--batch") o.batch = std::stoll(value);
    else if (key == "--input-size") o.input_size = std::stoll(value);
    else if (key == "--classes") o.classes = std::stoll(value);
    else if (key == "--iters") o.iters = std::stoll(value);
    else if (key == "--warmup") o.warmup = std::stoll(value);
    else throw std::invalid_argument("onnx_bench: unknown option " + key);
  }
  if (o.out.empty()) throw std::invalid_argument("onnx_bench: --out DIR is required");
  return o;
}

// Statistics and affine parameters away from 0 and 1, so the comparison sees them.
void randomize(tandem::nn::Module& model) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (auto& [name, b] : model.named_buffers()) {
    if (b->dtype() != tandem::DType::kF32) continue;
    const bool var = name.ends_with("running_var");
    std::generate_n(b->data<float>(), b->numel(), [&] { return var ? u(rng) : u(rng) - 1.0f; });
  }
}

void write(const std::filesystem::path& path, const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).to_format(tandem::MemoryFormat::kContiguous);
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(host.raw_data()),
                                              static_cast<std::streamsize>(host.nbytes()));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run(const Options& o) {
  Device device = Device::cpu();
  if (o.device == "cuda") {
    const tandem::backend::CudaPluginStatus& plugin = tandem::backend::load_cuda_plugin();
    if (!plugin.loaded || plugin.device_count < 1) {
      std::fprintf(stderr, "onnx_bench: no usable GPU: %s\n", plugin.summary().c_str());
      return 2;
    }
    device = Device::cuda(0);
  }
  std::filesystem::create_directories(o.out);
  tandem::models::ModelSpec spec;
  spec.name = o.model, spec.num_classes = o.classes, spec.in_channels = 3, spec.input_size = o.input_size;
  auto model = tandem::models::create_model(spec);
  randomize(*model);
  tandem::exporter::OnnxInputSpec input;
  input.shape = {2, 3, o.input_size, o.input_size};
  auto start = std::chrono::steady_clock::now();
  const auto summary = tandem::exporter::export_onnx(*model, input, std::filesystem::path(o.out) / "model.onnx");
  const double export_s = seconds_since(start);

  Tensor x = Tensor::empty({o.batch, 3, o.input_size, o.input_size});
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::generate_n(x.data<float>(), x.numel(), [&] { return normal(rng); });
  write(std::filesystem::path(o.out) / "input.bin", x);

  tandem::ExecutionContext ctx(device);
  ctx.bind();
  model->to(device);
  model->eval();
  tandem::autograd::NoGradGuard no_grad;
  // channels_last, Tandem's fast layout for convolutions (the values, and so the logits, are the same).
  const Tensor xd = x.to_format(tandem::MemoryFormat::kChannelsLast).to(device);
  Tensor logits;
  for (int64_t i = 0; i < o.warmup; ++i) logits = model->forward(ctx, tandem::autograd::Variable(xd)).value();
  ctx.stream().synchronize();
  start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.iters; ++i) logits = model->forward(ctx, tandem::autograd::Variable(xd)).value();
  ctx.stream().synchronize();
  const double run_s = seconds_since(start);
  write(std::filesystem::path(o.out) / "tandem_logits.bin", logits);
  std::printf(
      "{\"model\": \"%s\", \"device\": \"%s\", \"batch\": %lld, \"input_size\": %lld, \"export_s\": %.3f, "
      "\"onnx_bytes\": %llu, \"onnx_nodes\": %lld, \"tandem_ms_per_batch\": %.3f, \"tandem_images_per_s\": %.1f}\n",
      o.model.c_str(), device.str().c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.input_size),
      export_s, static_cast<unsigned long long>(summary.file_bytes), static_cast<long long>(summary.nodes),
      1e3 * run_s / static_cast<double>(o.iters), static_cast<double>(o.batch * o.iters) / run_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnx_bench: %s\n", e.what());
    return 1;
  }
}
