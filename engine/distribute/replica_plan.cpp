#include "engine/distribute/replica_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "engine/core/context.h"
#include "engine/core/error.h"

namespace tandem::distribute {
namespace {

constexpr int kMaxCpuReplicas = 1024;

int parse_count(std::string_view text, std::string_view what) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TANDEM_CHECK(ec == std::errc() && end == text.data() + text.size() && value > 0, ErrorCode::kInvalidArgument,
               "devices: '{}' is not a valid {}", text, what);
  return value;
}

std::vector<Device> cpu_devices(int count) { return std::vector<Device>(static_cast<size_t>(count), Device::cpu()); }

std::vector<Device> gpu_devices(const ReplicaPlanRequest& r) {
  std::vector<Device> out;
  if (r.devices == "all") {
    for (int i = 0; i < r.visible_gpus; ++i) out.push_back(Device::cuda(i));
    return out;
  }
  TANDEM_CHECK(!r.devices.starts_with("cpu:"), ErrorCode::kInvalidArgument,
               "devices: '{}' asks for CPU replicas but device is '{}'; set device: cpu", r.devices, r.device);
  if (!r.devices.starts_with("[")) {
    int count = parse_count(r.devices, "GPU count");
    TANDEM_CHECK(count <= r.visible_gpus, ErrorCode::kInvalidArgument,
                 "devices: {} GPUs asked for but {} visible (check CUDA_VISIBLE_DEVICES, or run `trainer doctor`)",
                 count, r.visible_gpus);
    for (int i = 0; i < count; ++i) out.push_back(Device::cuda(i));
    return out;
  }
  TANDEM_CHECK(r.devices.ends_with("]") && r.devices.size() > 2, ErrorCode::kInvalidArgument,
               "devices: '{}' is not a list of GPU indices such as [0, 1]", r.devices);
  std::string_view list(r.devices.data() + 1, r.devices.size() - 2);
  for (size_t start = 0; start <= list.size();) {
    size_t comma = std::min(list.find(',', start), list.size());
    std::string_view item = list.substr(start, comma - start);
    while (item.starts_with(' ')) item.remove_prefix(1);
    int index = item == "0" ? 0 : parse_count(item, "GPU index");
    TANDEM_CHECK(index < r.visible_gpus, ErrorCode::kInvalidArgument,
                 "devices: GPU {} does not exist: {} visible (indices 0 to {})", index, r.visible_gpus,
                 r.visible_gpus - 1);
    Device d = Device::cuda(index);
    TANDEM_CHECK(std::find(out.begin(), out.end(), d) == out.end(), ErrorCode::kInvalidArgument,
                 "devices: GPU {} is listed twice", index);
    out.push_back(d);
    start = comma + 1;
  }
  return out;
}

// CPU replicas: cpu:N, or one replica when devices names GPUs that are not being used.
int cpu_replica_count(const std::string& devices) {
  if (!devices.starts_with("cpu:")) return 1;
  const int count = parse_count(std::string_view(devices).substr(4), "CPU replica count");
  // Checked before any per-replica vector is built: each replica is a thread with its own model.
  TANDEM_CHECK(count <= kMaxCpuReplicas, ErrorCode::kInvalidArgument,
               "devices: cpu:{} asks for more than the {} CPU replicas this runs (one thread and one model each)",
               count, kMaxCpuReplicas);
  return count;
}

void plan_batch(ReplicaPlan& plan, const ReplicaPlanRequest& r) {
  int64_t n = plan.replicas();
  TANDEM_CHECK((r.global_batch_size > 0) != (r.per_replica_batch_size > 0), ErrorCode::kInvalidArgument,
               "give exactly one of global_batch_size ({}) or per_replica_batch_size ({})", r.global_batch_size,
               r.per_replica_batch_size);
  if (r.per_replica_batch_size > 0) {
    plan.per_replica_batch_size = r.per_replica_batch_size;
    plan.global_batch_size = r.per_replica_batch_size * n;
    return;
  }
  int64_t g = r.global_batch_size;
  if (g % n != 0) {
    int64_t below = g / n * n, above = below + n;
    throw_error(ErrorCode::kInvalidArgument,
                "global_batch_size {} does not divide across {} replicas: use {} (per-replica {}) or {} (per-replica "
                "{}), or give per_replica_batch_size instead",
                g, n, below > 0 ? below : above, below > 0 ? below / n : above / n, above, above / n);
  }
  plan.global_batch_size = g;
  plan.per_replica_batch_size = g / n;
}

}  // namespace

std::string ReplicaPlan::describe() const {
  std::vector<std::string> names;
  for (const Device& d : devices) names.push_back(d.str());
  std::string where = devices.front().is_cpu()
                          ? fmt::format("cpu ({} thread{} each)", threads_per_replica, threads_per_replica == 1 ? "" : "s")
                          : fmt::format("{}", fmt::join(names, ", "));
  std::string count = processes == 1 ? fmt::format("{} replica{}", replicas(), replicas() == 1 ? "" : "s")
                                     : fmt::format("{} replicas ({} processes x {})", replicas(), processes,
                                                   local_replicas());
  return fmt::format("{} on {}, per-replica batch {}, global batch {}", count, where, per_replica_batch_size,
                     global_batch_size);
}

ReplicaPlan plan_replicas(const ReplicaPlanRequest& r) {
  ReplicaPlan plan;
  bool want_gpu = r.device == "cuda" || (r.device == "auto" && !r.devices.starts_with("cpu:"));
  if (want_gpu && r.visible_gpus == 0) {
    TANDEM_CHECK(r.device != "cuda", ErrorCode::kUnavailable,
                 "device: cuda, but no usable GPU: {}. Run `trainer doctor` for the full diagnosis, or set device: cpu",
                 r.why_no_gpu.empty() ? "the CUDA backend is not loaded" : r.why_no_gpu);
    plan.fallback_warning = fmt::format("device: auto found no usable GPU ({}); training on the CPU",
                                        r.why_no_gpu.empty() ? "the CUDA backend is not loaded" : r.why_no_gpu);
    want_gpu = false;
  }
  TANDEM_CHECK(r.device == "auto" || r.device == "cpu" || r.device == "cuda", ErrorCode::kInvalidArgument,
               "device: '{}' is not one of auto, cpu, cuda", r.device);
  plan.devices = want_gpu ? gpu_devices(r) : cpu_devices(cpu_replica_count(r.devices));
  TANDEM_CHECK(!plan.devices.empty(), ErrorCode::kInvalidArgument, "devices: '{}' selects no device", r.devices);
  TANDEM_CHECK(plan.replicas() <= 64, ErrorCode::kInvalidArgument, "devices: {} replicas is more than 64",
               plan.replicas());
  TANDEM_CHECK(r.processes >= 1 && r.process_rank >= 0 && r.process_rank < r.processes, ErrorCode::kInvalidArgument,
               "process rank {} of {} processes", r.process_rank, r.processes);
  plan.processes = r.processes;
  plan.process_rank = r.process_rank;
  int cores = r.cores > 0 ? r.cores : available_cores();
  plan.threads_per_replica = want_gpu ? 1 : std::max(1, cores / plan.local_replicas());
  if (!want_gpu && r.threads_per_replica > 0) {
    plan.threads_per_replica = r.threads_per_replica;
    // oneDNN's OpenMP threads spin while they wait: more of them than cores costs far more than it gives.
    if (r.threads_per_replica * plan.local_replicas() > cores) {
      plan.oversubscribed_warning = fmt::format(
          "threads_per_replica {} x {} replica(s) is {} threads on {} core(s): spinning threads will slow every "
          "step many times over (set OMP_WAIT_POLICY=PASSIVE, or lower threads_per_replica)",
          r.threads_per_replica, plan.local_replicas(), r.threads_per_replica * plan.local_replicas(), cores);
    }
  }
  plan_batch(plan, r);
  return plan;
}

}  // namespace tandem::distribute
