// Attention forward + backward: autograd::scaled_dot_product_attention (tiled, online softmax, the
// backward recomputing the probabilities) at one sequence length, timed, with the memory it needed
// beyond its inputs. On the CPU, bench/run_attention_bench.sh runs it over T = 256 to 4096 beside
// PyTorch's eager attention (bench/pytorch_attention.py), one process per length so each peak is its
// own. On a GPU (--device cuda), tools/scripts/gpu_check.sh runs it beside PyTorch's
// F.scaled_dot_product_attention (bench/pytorch_attention_gpu.py); --layout packed times
// autograd::packed_self_attention on a (B, T, 3 H D) projection, as GPT's blocks call it.
//
// Memory is measured the same way for both engines on the CPU: the peak resident set of the process
// (getrusage) minus the resident set once the inputs exist. Ours also prints the caching allocator's
// peak of tensor bytes in use (on a GPU, the device's).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/plugin_loader.h"
#include "engine/core/allocator.h"
#include "engine/core/random.h"

namespace {

using tandem::Device;
using tandem::ExecutionContext;
using tandem::Shape;
using tandem::Tensor;
using tandem::autograd::Variable;
using Clock = std::chrono::steady_clock;

struct Options {
  int64_t batch = 1, heads = 12, seq_len = 1024, head_dim = 64;
  int reps = 3, warmup = 1, threads = 0;
  bool causal = true;
  bool bf16 = false;    // precision: bf16 (cpu_attention_bf16.cpp; the tensor-core kernels on a GPU)
  bool cuda = false;    // --device cuda: cuda:0
  bool packed = false;  // --layout packed: packed_self_attention on (B, T, 3 H D)
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "attention_bench: %s\nusage: attention_bench [--seq-len T] [--batch B] [--heads H] [--head-dim D] "
               "[--reps N] [--warmup N] [--threads N] [--causal 0|1] [--precision fp32|bf16] [--device cpu|cuda] "
               "[--layout heads|packed]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--precision" && i + 1 < argc) {
      const std::string_view p = argv[++i];
      if (p != "fp32" && p != "bf16") usage("--precision is fp32 or bf16");
      o.bf16 = p == "bf16";
      continue;
    }
    if (a == "--device" && i + 1 < argc) {
      const std::string_view d = argv[++i];
      if (d != "cpu" && d != "cuda") usage("--device is cpu or cuda");
      o.cuda = d == "cuda";
      continue;
    }
    if (a == "--layout" && i + 1 < argc) {
      const std::string_view l = argv[++i];
      if (l != "heads" && l != "packed") usage("--layout is heads or packed");
      o.packed = l == "packed";
      continue;
    }
    if (i + 1 >= argc) usage("every option takes a value");
    const long v = std::strtol(argv[++i], nullptr, 10);
    if (v < 0 || (v == 0 && a != "--threads" && a != "--causal" && a != "--warmup")) usage("values are positive");
    if (a == "--seq-len") o.seq_len = v;
    else if (a == "--batch") o.batch = v;
    else if (a == "--heads") o.heads = v;
    else if (a == "--head-dim") o.head_dim = v;
    else if (a == "--reps") o.reps = static_cast<int>(v);
    else if (a == "--warmup") o.warmup = static_cast<int>(v);
    else if (a == "--threads") o.threads = static_cast<int>(v);
    else if (a == "--causal") o.causal = v != 0;
    else usage("unknown option");
  }
  return o;
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

int64_t peak_resident_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

Tensor normal(const Shape& shape, tandem::Generator& g, Device device) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = g.normal();
  return device.is_cpu() ? t : t.to(device);
}

// The timed inputs: q, k and v (B, H, T, D), or one packed projection (B, T, 3 H D).
struct Inputs {
  std::vector<Variable> leaves;
  Tensor dy;
};

Inputs make_inputs(const Options& o, Device device) {
  tandem::Generator g(1);
  Inputs in;
  if (o.packed) {
    in.leaves.emplace_back(normal({o.batch, o.seq_len, 3 * o.heads * o.head_dim}, g, device), true);
    in.dy = normal({o.batch, o.seq_len, o.heads * o.head_dim}, g, device);
    return in;
  }
  const Shape shape{o.batch, o.heads, o.seq_len, o.head_dim};
  for (int i = 0; i < 3; ++i) in.leaves.emplace_back(normal(shape, g, device), true);
  in.dy = normal(shape, g, device);
  return in;
}

Variable attend(ExecutionContext& ctx, const Options& o, const Inputs& in) {
  namespace ag = tandem::autograd;
  if (o.packed) return ag::packed_self_attention(ctx, in.leaves[0], o.heads, 0.0f, o.causal);
  return ag::scaled_dot_product_attention(ctx, in.leaves[0], in.leaves[1], in.leaves[2], {}, 0.0f, o.causal);
}

int run(const Options& o) {
  const Device device = o.cuda ? Device::cuda(0) : Device::cpu();
  if (o.cuda) {
    const tandem::backend::CudaPluginStatus& plugin = tandem::backend::load_cuda_plugin();
    if (!plugin.loaded || plugin.device_count == 0) throw std::runtime_error("no GPU: " + plugin.summary());
  }
  ExecutionContext ctx(device, o.threads, 1,
                       tandem::KernelOptions{.precision = o.bf16 ? tandem::Precision::kBf16 : tandem::Precision::kF32});
  if (o.cuda) ctx.bind();
  Inputs in = make_inputs(o, device);
  const int64_t baseline = resident_bytes(), inputs_bytes = ctx.allocator().stats().bytes_in_use;

  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    for (Variable& x : in.leaves) x.zero_grad();
    auto start = Clock::now();
    Variable y = attend(ctx, o, in);
    // sum(y * dy) seeds the backward with dy, as PyTorch's y.backward(dy).
    Variable loss = tandem::autograd::sum(ctx, tandem::autograd::mul(ctx, y, Variable(in.dy)));
    loss.backward(&ctx);
    if (o.cuda) {
      ctx.stream().synchronize();  // the GPU's work is done, as torch.cuda.synchronize() in the reference
    } else {
      (void)in.leaves[0].grad().to_vector();  // the result is read, as PyTorch's timing does
    }
    if (i >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto stats = ctx.allocator().stats();
  std::printf("{\"engine\": \"tandem\", \"device\": \"%s\", \"layout\": \"%s\", \"seq_len\": %lld, "
              "\"batch\": %lld, \"heads\": %lld, \"head_dim\": %lld, "
              "\"causal\": %s, \"precision\": \"%s\", \"threads\": %d, \"ms_p50\": %.3f, \"ms_min\": %.3f, "
              "\"peak_extra_bytes\": %lld, "
              "\"allocator_peak_bytes\": %lld, \"allocator_peak_extra_bytes\": %lld}\n",
              o.cuda ? "cuda" : "cpu", o.packed ? "packed" : "heads", static_cast<long long>(o.seq_len),
              static_cast<long long>(o.batch), static_cast<long long>(o.heads), static_cast<long long>(o.head_dim),
              o.causal ? "true" : "false", o.bf16 ? "bf16" : "fp32", ctx.num_threads(), ms[ms.size() / 2], ms.front(),
              static_cast<long long>(peak_resident_bytes() - baseline), static_cast<long long>(stats.peak_bytes_in_use),
              static_cast<long long>(stats.peak_bytes_in_use - inputs_bytes));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}
