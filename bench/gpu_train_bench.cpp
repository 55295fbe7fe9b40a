// Training throughput on one GPU, in fp32, tf32 or bf16 (ExecutionContext::options().precision):
//   --model resnet50 (default): the models registry's ResNet-50 on synthetic 224x224x3 input (1000
//     classes), batch 256, channels_last, SGD with momentum; prints images/s. bench/pytorch_resnet50.py
//     is the same step in PyTorch.
//   --model gpt2: GPT-2 124M (nanoGPT's GPTConfig: block 1024, vocab 50304, 12 layers, 12 heads, 768
//     wide, biases, dropout 0) on random tokens, batch 8 x 1024, AdamW (lr 6e-4, betas 0.9/0.95,
//     weight decay 0.1 on 2-D weights); prints tokens/s. bench/pytorch_gpt2.py is the same step in
//     PyTorch (eager attention and F.scaled_dot_product_attention).
// Both print step p50/p95 and the device allocator's peak; tools/scripts/gpu_check.sh runs them
// beside PyTorch on the lent GPU and prints the ratios (docs/GPU_CHECK.md).
//
//   gpu_train_bench [--model resnet50|gpt2] [--precision fp32|tf32|bf16[,...]] [--batch N] [--steps N]
//                   [--warmup N] [--format nhwc|nchw] [--device cuda:K] [--no-cudnn-benchmark] [--profile N]
//                   [--classifier fused|unfused] [--json]
//
// --classifier: GPT-2's lm_head and loss as the trainer runs them, fused in chunks of rows (default;
// docs/TRANSFORMERS.md, "The fused classifier"), or as model.forward's logits then cross_entropy_loss.
//
// --profile N: after the timed steps, N more steps with every kernel call fenced by a stream
// synchronize (bench/support/kernel_timing.h), reported as milliseconds per step per kernel table
// entry and the time outside them (autograd, allocation, launch gaps). Those steps run slower than
// the timed ones and are not part of the images/s figure. SPDLOG_LEVEL=debug logs each
// convolution's chosen cuDNN algorithm.
//
// The peak is the device allocator's over the whole process (it never resets): with several precisions
// in one run, later ones report the highest so far; gpu_check.sh runs one precision per process.
// Exit 0: every precision asked for ran; 1: a step failed (the error is printed and the other
// precisions still run); 2: no usable GPU (the CUDA plugin's reason is printed), or bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <spdlog/cfg/env.h>

#include "bench/support/kernel_timing.h"
#include "engine/autograd/ops.h"
#include "engine/backend/plugin_loader.h"
#include "engine/core/allocator.h"
#include "engine/core/random.h"
#include "engine/nn/init.h"
#include "engine/nn/linear_head.h"
#include "engine/optim/optimizer.h"
#include "models/registry.h"

namespace {

using tandem::Device;
using tandem::ExecutionContext;
using tandem::MemoryFormat;
using tandem::Precision;
using tandem::Tensor;
using Clock = std::chrono::steady_clock;

constexpr int64_t kClasses = 1000, kSize = 224, kChannels = 3;
constexpr int64_t kGptBlock = 1024, kGptVocab = 50304;

struct Options {
  std::string model = "resnet50";
  std::vector<Precision> precisions{Precision::kBf16};
  int64_t batch = 0;  // 0: the model's default (256 images, 8 sequences)
  int steps = 20, warmup = 5;
  MemoryFormat format = MemoryFormat::kChannelsLast;
  Device device = Device::cuda(0);
  bool cudnn_benchmark = true;  // as the PyTorch reference's torch.backends.cudnn.benchmark = True
  int profile_steps = 0;
  bool fused_classifier = true;
  bool json = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gpu_train_bench: %s\nusage: gpu_train_bench [--model resnet50|gpt2] [--precision fp32|tf32|bf16[,...]] [--batch N] "
               "[--steps N] [--warmup N] [--format nhwc|nchw] [--device cuda:K] [--no-cudnn-benchmark] [--profile N] "
               "[--classifier fused|unfused] [--json]\n",
               why.c_str());
  std::exit(2);
}

std::vector<Precision> parse_precisions(const std::string& list) {
  std::vector<Precision> out;
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    std::string one = list.substr(start, comma - start);
    if (one == "fp32") out.push_back(Precision::kF32);
    else if (one == "tf32") out.push_back(Precision::kTf32);
    else if (one == "bf16") out.push_back(Precision::kBf16);
    else usage("--precision takes fp32, tf32 or bf16 (comma separated), got '" + one + "'");
    start = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + a);
      return argv[++i];
    };
    auto count = [&](long min) {
      std::string v = value();
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < min) usage(a + " needs an integer >= " + std::to_string(min) + ", got " + v);
      return n;
    };
    if (a == "--model") {
      o.model = value();
      if (o.model != "resnet50" && o.model != "gpt2") usage("--model takes resnet50 or gpt2, got " + o.model);
    } else if (a == "--precision") o.precisions = parse_precisions(value());
    else if (a == "--batch") o.batch = count(1);
    else if (a == "--steps") o.steps = static_cast<int>(count(1));
    else if (a == "--warmup") o.warmup = static_cast<int>(count(1));  // >= 1: cuDNN plans on the first step
    else if (a == "--no-cudnn-benchmark") o.cudnn_benchmark = false;
    else if (a == "--profile") o.profile_steps = static_cast<int>(count(1));
    else if (a == "--json") o.json = true;
    else if (a == "--classifier") {
      const std::string c = value();
      if (c != "fused" && c != "unfused") usage("--classifier must be fused or unfused, got " + c);
      o.fused_classifier = c == "fused";
    }
    else if (a == "--format") {
      std::string f = value();
      if (f == "nhwc") o.format = MemoryFormat::kChannelsLast;
      else if (f == "nchw") o.format = MemoryFormat::kContiguous;
      else usage("--format must be nhwc or nchw, got " + f);
    } else if (a == "--device") {
      std::string d = value();
      try {
        o.device = Device::parse(d);
      } catch (const std::exception& e) {
        usage(e.what());
      }
      if (o.device.is_cpu()) usage("--device must be a GPU (cuda:K); bench/train_bench.cpp measures the CPU");
    } else {
      usage("unknown argument " + a);
    }
  }
  if (o.batch == 0) o.batch = o.model == "gpt2" ? 8 : 256;
  return o;
}

bool is_gpt(const Options& o) { return o.model == "gpt2"; }
// Examples per step times what each counts for: images, or the tokens a GPT predicts.
int64_t items_per_step(const Options& o) { return is_gpt(o) ? o.batch * kGptBlock : o.batch; }

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct Result {
  Precision precision = Precision::kF32;
  std::vector<double> step_s;
  double window_s = 0, first_step_s = 0, final_loss = 0;
  int64_t peak_bytes = 0;
  double profile_step_s = 0;  // per fenced step (--profile)
  std::vector<tandem::bench::KernelStats> kernels;
};

Tensor random_ids(const tandem::Shape& shape, int64_t below, uint64_t seed) {
  tandem::Generator g(seed);
  Tensor ids = Tensor::empty(shape, tandem::DType::kI64);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = static_cast<int64_t>(g.below(below));
  return ids;
}

// Synthetic input made once on the host and copied to the device: the bench measures the step,
// not a data pipeline. Random normals, never zeros (zeros run faster than real data on tensor cores);
// a GPT's tokens are drawn from GPT-2's 50257.
Tensor make_input(const Options& o) {
  if (is_gpt(o)) return random_ids({o.batch, kGptBlock}, 50257, 7).to(o.device);
  tandem::Generator g(7);
  Tensor x = Tensor::empty({o.batch, kChannels, kSize, kSize});
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = g.normal();
  return x.to_format(o.format).to(o.device);
}

Tensor make_labels(const Options& o) {
  if (is_gpt(o)) return random_ids({o.batch, kGptBlock}, 50257, 11).to(o.device);
  tandem::Generator g(11);
  Tensor labels = Tensor::empty({o.batch}, tandem::DType::kI64);
  for (int64_t i = 0; i < o.batch; ++i) labels.data<int64_t>()[i] = static_cast<int64_t>(g.below(kClasses));
  return labels.to(o.device);
}

Result run(const Options& o, Precision precision) {
  ExecutionContext ctx(o.device);
  ctx.bind();  // implicit copies (Tensor::to, zero_) are ordered on this context's stream
  ctx.options().precision = precision;
  ctx.options().cudnn_benchmark = o.cudnn_benchmark;
  tandem::nn::init::manual_seed(1);
  auto model = is_gpt(o) ? tandem::models::create_model({.name = "gpt", .block_size = kGptBlock, .vocab_size = kGptVocab,
                                                          .n_layer = 12, .n_head = 12, .n_embd = 768, .bias = true})
                         : tandem::models::create_model({.name = "resnet50", .num_classes = kClasses,
                                                          .in_channels = kChannels, .input_size = kSize});
  model->to(o.device);
  model->train();
  const tandem::optim::OptimizerOptions sgd{.name = "sgd", .lr = 0.01f, .weight_decay = 1e-4f, .momentum = 0.9f};
  const tandem::optim::OptimizerOptions adamw{.name = "adamw", .lr = 6e-4f, .weight_decay = 0.1f,
                                              .exclude_norm_and_bias_from_weight_decay = true, .beta1 = 0.9f,
                                              .beta2 = 0.95f};
  auto optimizer = tandem::optim::make_optimizer(model->named_parameters(), is_gpt(o) ? adamw : sgd);
  Tensor x = make_input(o);
  Tensor labels = make_labels(o);

  Result r;
  r.precision = precision;
  tandem::autograd::Variable loss;
  auto step = [&] {
    optimizer->zero_grad();
    const tandem::autograd::Variable input(x);
    loss = o.fused_classifier
               ? tandem::nn::model_cross_entropy_loss(ctx, *model, input, labels, 0.0f, items_per_step(o))
               : tandem::autograd::cross_entropy_loss(ctx, model->forward(ctx, input), labels, 0.0f, items_per_step(o));
    loss.backward(&ctx);
    optimizer->step(ctx);
  };
  // Warm-up: module loading, handle creation, cuDNN's algorithm search and the allocator's first
  // allocations happen here. Every step ends with a stream synchronize so that a host-clock step
  // time is the device's time for that step (the PyTorch reference synchronizes the same way).
  for (int i = 0; i < o.warmup; ++i) {
    auto t0 = Clock::now();
    step();
    ctx.stream().synchronize();
    if (i == 0) r.first_step_s = seconds(t0, Clock::now());
  }
  ctx.stream().synchronize();
  auto start = Clock::now();
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = Clock::now();
    step();
    ctx.stream().synchronize();
    r.step_s.push_back(seconds(t0, Clock::now()));
  }
  ctx.stream().synchronize();
  r.window_s = seconds(start, Clock::now());
  r.peak_bytes = ctx.allocator().stats().peak_bytes_in_use;
  if (o.profile_steps > 0) {
    tandem::bench::install_timed_kernels(o.device.type, items_per_step(o), [&ctx] { ctx.stream().synchronize(); });
    auto t0 = Clock::now();
    for (int i = 0; i < o.profile_steps; ++i) step();
    ctx.stream().synchronize();
    r.profile_step_s = seconds(t0, Clock::now()) / o.profile_steps;
    tandem::bench::set_kernel_timing(false);
    r.kernels = tandem::bench::kernel_stats();
  }
  r.final_loss = loss.value().to(Device::cpu()).to_vector()[0];
  return r;
}

const char* format_flag(MemoryFormat f) { return f == MemoryFormat::kChannelsLast ? "nhwc" : "nchw"; }

// The --profile figures: JSON members (after a comma), or a table sorted by time.
void print_profile(const Options& o, const Result& r) {
  if (o.profile_steps == 0) return;
  const double n = o.profile_steps;
  double in_kernels = 0;
  for (const auto& k : r.kernels) in_kernels += k.seconds;
  const double outside_ms = 1e3 * (r.profile_step_s - in_kernels / n);
  if (o.json) {
    std::printf(", \"profile\": {\"steps\": %d, \"step_ms\": %.3f, \"outside_kernels_ms\": %.3f, \"kernels_ms\": {",
                o.profile_steps, 1e3 * r.profile_step_s, outside_ms);
    const char* sep = "";
    for (const auto& k : r.kernels) {
      if (k.calls == 0) continue;
      std::printf("%s\"%s\": [%.3f, %lld]", sep, k.name, 1e3 * k.seconds / n, static_cast<long long>(k.calls / o.profile_steps));
      sep = ", ";
    }
    std::printf("}}");
    return;
  }
  std::vector<tandem::bench::KernelStats> sorted = r.kernels;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  std::printf("  fenced step %.1f ms (%d steps, every kernel call synchronized):\n", 1e3 * r.profile_step_s,
              o.profile_steps);
  for (const auto& k : sorted) {
    if (k.calls == 0) continue;
    std::printf("    %-38s %9.2f ms %6lld calls\n", k.name, 1e3 * k.seconds / n, static_cast<long long>(k.calls / o.profile_steps));
  }
  std::printf("    %-38s %9.2f ms\n", "outside kernels (autograd, glue, gaps)", outside_ms);
}

void print(const Options& o, const Result& r) {
  const double per_sec = static_cast<double>(items_per_step(o)) * o.steps / r.window_s;
  const char* unit = is_gpt(o) ? "tokens" : "images";
  std::string precision(tandem::precision_name(r.precision));
  if (o.json) {
    std::printf("{\"engine\": \"tandem\", \"model\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", "
                "\"format\": \"%s\", \"batch\": %lld, \"steps\": %d, \"warmup\": %d, \"cudnn_benchmark\": %s, "
                "\"%s_per_sec\": %.2f, \"step_ms\": {\"p50\": %.3f, \"p95\": %.3f}, \"first_step_ms\": %.1f, "
                "\"peak_bytes_in_use\": %lld, \"final_loss\": %.5f, \"classifier\": \"%s\"",
                o.model.c_str(), o.device.str().c_str(), precision.c_str(), format_flag(o.format),
                static_cast<long long>(o.batch), o.steps, o.warmup, o.cudnn_benchmark ? "true" : "false", unit, per_sec,
                1e3 * percentile(r.step_s, 0.5), 1e3 * percentile(r.step_s, 0.95), 1e3 * r.first_step_s,
                static_cast<long long>(r.peak_bytes), r.final_loss, o.fused_classifier ? "fused" : "unfused");
    print_profile(o, r);
    std::printf("}\n");
  } else {
    std::printf("%s %s %s on %s, batch %lld, %d timed steps after %d warm-up (first step %.0f ms)\n", o.model.c_str(),
                precision.c_str(), format_flag(o.format), o.device.str().c_str(), static_cast<long long>(o.batch),
                o.steps, o.warmup, 1e3 * r.first_step_s);
    std::printf("  %s/s %.1f   step p50 %.1f ms  p95 %.1f ms   peak device memory %.2f GiB   final loss %.4f\n", unit,
                per_sec, 1e3 * percentile(r.step_s, 0.5), 1e3 * percentile(r.step_s, 0.95),
                static_cast<double>(r.peak_bytes) / (1 << 30), r.final_loss);
    print_profile(o, r);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  spdlog::cfg::load_env_levels();
  // The CUDA kernels live in the plugin: without it Device::cuda has no services or kernels.
  const tandem::backend::CudaPluginStatus& plugin = tandem::backend::load_cuda_plugin();
  if (!plugin.loaded || plugin.device_count <= o.device.index) {
    std::fprintf(stderr, "gpu_train_bench: no usable GPU %s: %s\n", o.device.str().c_str(),
                 plugin.loaded ? "the plugin sees fewer devices" : plugin.summary().c_str());
    return 2;
  }
  std::fprintf(stderr, "gpu_train_bench: %s\n", plugin.summary().c_str());
  bool ok = true;
  for (Precision p : o.precisions) {
    try {
      print(o, run(o, p));
    } catch (const std::exception& e) {
      // One precision failing (an unsupported bf16 path, say) is a finding; the others still run.
      std::fprintf(stderr, "gpu_train_bench: %s step failed: %s\n", std::string(tandem::precision_name(p)).c_str(),
                   e.what());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
