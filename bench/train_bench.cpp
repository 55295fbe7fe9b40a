// One training step loop (SGD momentum 0.9) of a model from the models registry, in NCHW and
// channels_last: the CIFAR-style ResNet-20 on Fashion-MNIST shapes (batch 128, 1x28x28, 10
// classes), ResNet-18 at batch 32 on 3x64x64 (200 classes, Tiny ImageNet's shapes), or a
// 784-512-512-10 MLP at batch 128. Prints images/s, step-time percentiles, the forward/backward/
// optimizer split, the convolutions' share (the oneDNN floor: the same step's convolutions alone),
// system allocations, page faults and peak RSS of the warm steps, and (--profile) time per kernel;
// bench/run_train_bench.sh sets it beside PyTorch's.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <sys/resource.h>
#include <type_traits>
#include <vector>

#include "bench/support/kernel_timing.h"
#include "engine/autograd/ops.h"
#include "engine/core/yaml_walk.h"
#include "engine/train/config.h"
#include "engine/backend/registry.h"
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
using tandem::Tensor;
using Clock = std::chrono::steady_clock;
namespace backend = tandem::backend;
using tandem::bench::kernel_stats;
using tandem::bench::KernelStats;
using tandem::bench::reset_kernel_stats;

// The shapes of one bench: the PyTorch twin (bench/pytorch_train.py) uses the same table, or the
// same config file (--config: its model section, train batch and optimizer).
struct Workload {
  std::string model;
  int64_t batch, channels, size, classes;
  std::vector<int64_t> hidden;  // mlp only
  tandem::nn::ModelSpec spec;   // --config: the whole model section
  tandem::optim::OptimizerOptions optimizer{.name = "sgd", .lr = 0.1f, .momentum = 0.9f};
  bool from_config = false;
};

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all{{"resnet20", 128, 1, 28, 10, {}, {}, {}, false},
                                         {"resnet18", 32, 3, 64, 200, {}, {}, {}, false},
                                         {"mlp", 128, 1, 28, 10, {512, 512}, {}, {}, false}};
  return all;
}

// The model, batch and optimizer of a run config (the data sections are not read).
Workload workload_from_config(const std::string& path) {
  tandem::train::TrainConfig c;
  tandem::yaml::Keys keys;
  tandem::train::add_train_keys(c, keys);
  for (const char* section : {"data", "eval_data"}) keys[section] = [](auto&, auto&) {};
  tandem::yaml::walk(tandem::yaml::load_file(path), "", keys);
  Workload w{c.model.name, c.loop.global_batch_size > 0 ? c.loop.global_batch_size : c.loop.per_replica_batch_size,
             c.model.in_channels, c.model.input_size, c.model.num_classes, c.model.hidden, c.model, c.optimizer, true};
  return w;
}

int64_t tally_batch = 128;  // the chosen workload's batch: the per-kernel tally tells activations by it

struct Options {
  Workload workload = workloads()[0];
  int steps = 30, warmup = 5, threads = 0;  // threads 0: every core this process may use
  std::vector<MemoryFormat> formats{MemoryFormat::kContiguous, MemoryFormat::kChannelsLast};
  bool json = false, profile = false;
  tandem::Precision precision = tandem::Precision::kF32;  // bf16: convolutions and matmuls in bf16
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "train_bench: %s\nusage: train_bench [--model resnet20|resnet18|mlp | --config FILE] [--steps N] [--warmup N] "
               "[--threads N] [--format nchw|nhwc|both] [--precision fp32|bf16] [--json] [--profile]\n",
               why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    auto count = [&](int min) {
      std::string v = value();
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < min) usage((a + " needs an integer >= " + std::to_string(min) + ", got " + v).c_str());
      return static_cast<int>(n);
    };
    if (a == "--steps") o.steps = count(1);
    else if (a == "--warmup") o.warmup = count(1);  // at least one: plans are made on the first step
    else if (a == "--threads") o.threads = count(0);
    else if (a == "--json") o.json = true;
    else if (a == "--profile") o.profile = true;
    else if (a == "--precision") {
      std::string p = value();
      if (p != "fp32" && p != "bf16") usage(("--precision must be fp32 or bf16, got " + p).c_str());
      o.precision = tandem::parse_precision(p);
    }
    else if (a == "--config") {
      o.workload = workload_from_config(value());
      if (!o.workload.spec.channels_last) o.formats = {MemoryFormat::kContiguous};
    } else if (a == "--model") {
      std::string m = value();
      auto it = std::find_if(workloads().begin(), workloads().end(), [&](const Workload& w) { return w.model == m; });
      if (it == workloads().end()) usage(("--model must be resnet20, resnet18 or mlp, got " + m).c_str());
      o.workload = *it;
    }
    else if (a == "--format") {
      std::string f = value();
      if (f == "nchw") o.formats = {MemoryFormat::kContiguous};
      else if (f == "nhwc") o.formats = {MemoryFormat::kChannelsLast};
      else if (f != "both") usage(("--format must be nchw, nhwc or both, got " + f).c_str());
    } else {
      usage(("unknown argument " + a).c_str());
    }
  }
  return o;
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// CPU seconds of the whole process (all threads): on a shared machine it says how much work a
// step took where wall time also counts waiting for a core (OpenMP spin-waits count as work).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Page faults of the process: a warm step that touches fresh pages (11 us each here) shows them.
int64_t minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Linux resets the peak RSS (VmHWM) to the current RSS on writing 5 to clear_refs: the peak that
// is read after the timed steps is then theirs, not the warm-up's.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

int64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:  123 kB"
  }
  return 0;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

struct Result {
  MemoryFormat format = MemoryFormat::kContiguous;
  int threads = 0;
  std::vector<double> step_s;
  double wall_s = 0, cpu_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  double allocations_per_step = 0, page_faults_per_step = 0;
  int64_t peak_bytes = 0, peak_rss_bytes = 0;
  double conv_s = 0;  // the convolution kernels' time: the floor no change outside oneDNN lowers
  double final_loss = 0;
  std::string load;
};

Result run(const Options& o, MemoryFormat format) {
  const Workload& w = o.workload;
  tandem::nn::init::manual_seed(1);
  tandem::nn::ModelSpec spec = w.spec;
  if (!w.from_config) {
    spec = {.name = w.model, .num_classes = w.classes, .in_channels = w.channels, .input_size = w.size,
            .hidden = w.hidden};
  }
  auto model = tandem::models::create_model(spec);
  auto optimizer = tandem::optim::make_optimizer(model->named_parameters(), w.optimizer);
  ExecutionContext ctx(Device::cpu(), o.threads, 0, tandem::KernelOptions{.precision = o.precision});

  // Inputs and labels made once: the bench measures the step, not a data pipeline. A GPT reads
  // block_size random tokens per example and predicts as many.
  tandem::Generator g(7);
  const bool text = spec.name == "gpt";
  Tensor x, labels;
  if (text) {
    x = Tensor::empty({w.batch, spec.block_size}, tandem::DType::kI64);
    labels = Tensor::empty({w.batch, spec.block_size}, tandem::DType::kI64);
    for (Tensor* t : {&x, &labels}) {
      for (int64_t i = 0; i < t->numel(); ++i) t->data<int64_t>()[i] = static_cast<int64_t>(g.below(spec.vocab_size));
    }
  } else {
    x = Tensor::empty({w.batch, w.channels, w.size, w.size});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = g.normal();
    x = x.to_format(format);
    labels = Tensor::empty({w.batch}, tandem::DType::kI64);
    for (int64_t i = 0; i < w.batch; ++i) labels.data<int64_t>()[i] = static_cast<int64_t>(g.below(w.classes));
  }
  const int64_t divisor = labels.numel();  // the mean over examples (over tokens for a GPT)

  Result r;
  r.format = format;
  r.threads = ctx.num_threads();
  auto step = [&](bool timed) {
    auto t0 = Clock::now();
    optimizer->zero_grad();
    // As the trainer's tasks: a GPT's head runs fused with the loss (nn/linear_head.h).
    auto loss = tandem::nn::model_cross_entropy_loss(ctx, *model, tandem::autograd::Variable(x), labels, 0.0f, divisor);
    auto t1 = Clock::now();
    loss.backward(&ctx);
    auto t2 = Clock::now();
    optimizer->step(ctx);
    auto t3 = Clock::now();
    if (!timed) return;
    r.step_s.push_back(seconds(t0, t3));
    r.forward_s += seconds(t0, t1);
    r.backward_s += seconds(t1, t2);
    r.optimizer_s += seconds(t2, t3);
    r.final_loss = loss.value().to_vector()[0];
  };
  for (int i = 0; i < o.warmup; ++i) step(false);
  reset_kernel_stats();
  reset_peak_rss();
  auto& allocator = tandem::allocator_for(Device::cpu());
  int64_t before = allocator.stats().system_allocations;
  int64_t faults_before = minor_page_faults();
  auto start = Clock::now();
  double cpu_start = process_cpu_seconds();
  for (int i = 0; i < o.steps; ++i) step(true);
  r.wall_s = seconds(start, Clock::now());
  r.cpu_s = process_cpu_seconds() - cpu_start;
  r.allocations_per_step = static_cast<double>(allocator.stats().system_allocations - before) / o.steps;
  r.page_faults_per_step = static_cast<double>(minor_page_faults() - faults_before) / o.steps;
  r.peak_rss_bytes = peak_rss_bytes();
  for (const KernelStats& s : kernel_stats()) {
    if (std::string_view(s.name).starts_with("conv2d_")) r.conv_s += s.seconds;
  }
  r.peak_bytes = allocator.stats().peak_bytes_in_use;
  r.load = load_average();
  return r;
}

const char* format_flag(MemoryFormat f) { return f == MemoryFormat::kChannelsLast ? "nhwc" : "nchw"; }

void print_json(const Options& o, const Result& r) {
  double n = static_cast<double>(o.steps);
  std::printf("{\"engine\": \"tandem\", \"model\": \"%s\", \"format\": \"%s\", \"precision\": \"%s\", "
              "\"threads\": %d, \"batch\": %lld, "
              "\"steps\": %d, \"warmup\": %d, \"images_per_sec\": %.2f, \"step_ms\": {\"p50\": %.3f, \"p95\": %.3f}, "
              "\"cpu_ms_per_step\": %.3f, \"breakdown_ms\": {\"forward\": %.3f, \"backward\": %.3f, \"optimizer\": %.3f}, "
              "\"system_allocations_per_step\": %.3f, \"page_faults_per_step\": %.1f, \"peak_rss_bytes\": %lld, "
              "\"peak_bytes_in_use\": %lld, \"conv_ms_per_step\": %.3f, \"final_loss\": %.5f, \"load_average\": \"%s\"",
              o.workload.model.c_str(), format_flag(r.format),
              std::string(tandem::precision_name(o.precision)).c_str(), r.threads,
              static_cast<long long>(o.workload.batch), o.steps, o.warmup,
              static_cast<double>(o.workload.batch) * n / r.wall_s, 1e3 * percentile(r.step_s, 0.5),
              1e3 * percentile(r.step_s, 0.95), 1e3 * r.cpu_s / n, 1e3 * r.forward_s / n, 1e3 * r.backward_s / n,
              1e3 * r.optimizer_s / n, r.allocations_per_step, r.page_faults_per_step,
              static_cast<long long>(r.peak_rss_bytes), static_cast<long long>(r.peak_bytes), 1e3 * r.conv_s / n,
              r.final_loss, r.load.c_str());
  std::printf(", \"kernels_ms\": {");
  const char* sep = "";
  for (const KernelStats& s : kernel_stats()) {
    if (s.calls == 0) continue;
    std::printf("%s\"%s\": %.3f", sep, s.name, 1e3 * s.seconds / n);
    sep = ", ";
  }
  std::printf("}}\n");
}

void print_text(const Options& o, const Result& r) {
  double n = static_cast<double>(o.steps);
  double batch = static_cast<double>(o.workload.batch);
  std::printf("%s %s %s, batch %lld, %d threads, %d timed steps after %d warm-up (load average %s)\n",
              o.workload.model.c_str(), format_flag(r.format), std::string(tandem::precision_name(o.precision)).c_str(),
              static_cast<long long>(o.workload.batch), r.threads,
              o.steps, o.warmup, r.load.c_str());
  std::printf("  images/s %.1f   step p50 %.1f ms  p95 %.1f ms   CPU %.1f ms/step   final loss %.4f\n",
              batch * n / r.wall_s, 1e3 * percentile(r.step_s, 0.5), 1e3 * percentile(r.step_s, 0.95),
              1e3 * r.cpu_s / n, r.final_loss);
  std::printf("  per step: forward+loss %.1f ms, backward %.1f ms, optimizer %.2f ms\n", 1e3 * r.forward_s / n,
              1e3 * r.backward_s / n, 1e3 * r.optimizer_s / n);
  std::printf("  convolutions alone (the oneDNN floor) %.1f ms/step, %.0f%% of the step\n", 1e3 * r.conv_s / n,
              100 * r.conv_s / r.wall_s);
  std::printf("  per warm step: %.2f system allocations, %.1f page faults; peak RSS %.1f MiB, peak tensors %.1f MiB\n",
              r.allocations_per_step, r.page_faults_per_step, static_cast<double>(r.peak_rss_bytes) / (1 << 20),
              static_cast<double>(r.peak_bytes) / (1 << 20));
  double kernel_total = 0;
  for (const KernelStats& s : kernel_stats()) kernel_total += s.seconds;
  if (o.profile) {
    std::vector<KernelStats> sorted = kernel_stats();
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    std::printf("  %-32s %9s %7s %6s %14s\n", "kernel", "ms/step", "share", "calls", "4-D args nchw/nhwc");
    for (const KernelStats& s : sorted) {
      if (s.calls == 0) continue;
      std::printf("  %-32s %9.2f %6.1f%% %6lld %7lld/%lld\n", s.name, 1e3 * s.seconds / n,
                  100 * s.seconds / r.wall_s, static_cast<long long>(s.calls) / o.steps,
                  static_cast<long long>(s.nchw_args) / o.steps, static_cast<long long>(s.nhwc_args) / o.steps);
    }
    double other = r.wall_s - kernel_total;
    std::printf("  %-32s %9.2f %6.1f%%\n", "outside kernels (autograd, glue)", 1e3 * other / n, 100 * other / r.wall_s);
  }
}

// In channels_last the whole network must run NHWC: a kernel that saw an NCHW 4-D tensor means
// some op converted back (or produced the wrong format), which would cost reorders every step.
bool check_layout(const Result& r) {
  if (r.format != MemoryFormat::kChannelsLast) return true;
  bool ok = true;
  for (const KernelStats& s : kernel_stats()) {
    if (s.nchw_args == 0) continue;
    std::fprintf(stderr, "train_bench: channels_last run: kernel %s saw %lld NCHW 4-D tensors per step\n", s.name,
                 static_cast<long long>(s.nchw_args / std::max(1, static_cast<int>(r.step_s.size()))));
    ok = false;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  tally_batch = o.workload.batch;
  tandem::bench::install_timed_kernels(tandem::DeviceType::kCpu, tally_batch);
  bool layout_ok = true;
  for (MemoryFormat f : o.formats) {
    try {
      Result r = run(o, f);
      if (o.json) print_json(o, r);
      else print_text(o, r);
      layout_ok = check_layout(r) && layout_ok;
    } catch (const std::exception& e) {
      // A format the engine cannot train in is a finding to report, not a reason to skip the other.
      std::fprintf(stderr, "train_bench: %s step failed: %s\n", format_flag(f), e.what());
      layout_ok = false;
    }
    std::fflush(stdout);
  }
  return layout_ok ? 0 : 1;
}
