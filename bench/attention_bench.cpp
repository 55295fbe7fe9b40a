// Attention forward + backward on the CPU: autograd::scaled_dot_product_attention (tiled, online
// softmax, the backward recomputing the probabilities) at one sequence length, timed, with the
// memory it needed beyond its inputs. bench/run_attention_bench.sh runs it over T = 256 to 4096
// beside PyTorch's eager attention (bench/pytorch_attention.py), one process per length so each
// peak is its own.
//
// Memory is measured the same way for both engines: the peak resident set of the process (getrusage)
// minus the resident set once the inputs exist. Ours also prints the caching allocator's peak of
// tensor bytes in use.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/autograd/ops.h"
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
  bool bf16 = false;  // precision: bf16 (cpu_attention_bf16.cpp)
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "attention_bench: %s\nusage: attention_bench [--seq-len T] [--batch B] [--heads H] [--head-dim D] "
               "[--reps N] [--warmup N] [--threads N] [--causal 0|1] [--precision fp32|bf16]\n",
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

Tensor normal(const Shape& shape, tandem::Generator& g) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = g.normal();
  return t;
}

int run(const Options& o) {
  ExecutionContext ctx(Device::cpu(), o.threads, 1,
                       tandem::KernelOptions{.precision = o.bf16 ? tandem::Precision::kBf16 : tandem::Precision::kF32});
  tandem::Generator g(1);
  const Shape shape{o.batch, o.heads, o.seq_len, o.head_dim};
  Variable q(normal(shape, g), true), k(normal(shape, g), true), v(normal(shape, g), true);
  Tensor dy = normal(shape, g);
  const int64_t baseline = resident_bytes();

  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    for (Variable* x : {&q, &k, &v}) x->zero_grad();
    auto start = Clock::now();
    Variable y = tandem::autograd::scaled_dot_product_attention(ctx, q, k, v, {}, 0.0f, o.causal);
    // sum(y * dy) seeds the backward with dy, as PyTorch's y.backward(dy).
    Variable loss = tandem::autograd::sum(ctx, tandem::autograd::mul(ctx, y, Variable(dy)));
    loss.backward(&ctx);
    (void)q.grad().to_vector();  // the result is read, as PyTorch's timing does
    if (i >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  const auto stats = tandem::allocator_for(Device::cpu()).stats();
  std::printf("{\"engine\": \"tandem\", \"seq_len\": %lld, \"batch\": %lld, \"heads\": %lld, \"head_dim\": %lld, "
              "\"causal\": %s, \"precision\": \"%s\", \"threads\": %d, \"ms_p50\": %.2f, \"ms_min\": %.2f, "
              "\"peak_extra_bytes\": %lld, "
              "\"allocator_peak_bytes\": %lld}\n",
              static_cast<long long>(o.seq_len), static_cast<long long>(o.batch), static_cast<long long>(o.heads),
              static_cast<long long>(o.head_dim), o.causal ? "true" : "false", o.bf16 ? "bf16" : "fp32",
              ctx.num_threads(), ms[ms.size() / 2],
              ms.front(), static_cast<long long>(peak_resident_bytes() - baseline),
              static_cast<long long>(stats.peak_bytes_in_use));
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
